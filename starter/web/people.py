"""Who the signed-in person is to the cards: their groups (the approvers file's, never the users
file's), whether this web app signs for them, and so which cards they may answer. A card offers
Approve and Reject (Grant and Stop run) only to a person whose answer the run would take, and
says who may, and why not this person, in one line.

The run decides in the end (the worker verifies every signed answer with its own approvers
file); this only spares a person the refusal they would get."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.approvers import ApproversFile
from runtime.signing_key import SigningKey
from workflows.model import BudgetStatus, Quorum
from workflows.people.budget import who_may

ANYONE = "anyone"


@dataclass(frozen=True)
class May:
    """Whether the viewer may answer a card, and the card's line saying who may (`whom`) and,
    when not this person, why not (`why_not`)."""

    whom: str
    """`2 of ops`, `ops or admins`, `anyone` (the `data-who-may` of the card)."""
    allowed: bool
    why_not: str = ""

    @property
    def line(self) -> str:
        """`who may answer: 2 of ops; you may not: you are in dev`."""
        if self.allowed or not self.why_not:
            return self.whom
        return f"{self.whom}; you may not: {self.why_not}"


@dataclass(frozen=True)
class Viewer:
    """The person looking at a page: their name, whether the page is in local mode (no sign-in:
    the web app signs nothing), the approvers file the web app reads and its signing key."""

    name: str | None
    local: bool
    approvers: ApproversFile | None
    key: SigningKey | None

    @property
    def listed(self) -> bool:
        """Whether the approvers file names this person."""
        return (
            bool(self.name)
            and self.approvers is not None
            and (self.approvers.person(self.name or "") is not None)
        )

    @property
    def groups(self) -> tuple[str, ...]:
        """The person's groups, as the approvers file has them (none when it does not list
        them)."""
        if self.approvers is None or not self.name:
            return ()
        return self.approvers.groups_of(self.name)

    @property
    def groups_text(self) -> str | None:
        """What the header says of the person's groups; None without an approvers file."""
        if self.approvers is None or self.local:
            return None
        if not self.listed:
            return "not in the approvers file"
        return f"groups: {', '.join(self.groups)}" if self.groups else "groups: none"

    def unsigned_because(self) -> str | None:
        """Why this web app cannot sign this person's answers, or None when it can."""
        if self.local:
            return "this web app signs nothing in local mode (no sign-in)"
        if self.key is None:
            return "this web app signs nothing (AGENT_WEB_SIGNING_KEY is not set)"
        if not self.name or not self.key.signs_for(self.name):
            service = self.key.service or "web"
            return (
                f"this web app does not sign for you (the approvers file has no"
                f" `{self.name} … via:{service}` line)"
            )
        return None

    def plainly(self, refusal: str) -> str:
        """The run's refusal of this person's answer, saying what was missing when this web app
        could not sign it and the run refused it as not from someone who may (`only ops may
        approve …`): one line."""
        why = self.unsigned_because()
        if why is None or not refusal.startswith("only "):
            return refusal
        return f"{refusal}: {why}, so this answer went unsigned"

    def _refusal(self, groups: list[str]) -> str | None:
        """Why the run would refuse this person's answer where only `groups` may answer, signed,
        or None when it would take it."""
        if self.approvers is None:  # no file, no key: nothing is signed here
            return self.unsigned_because()
        return self._outside(groups) or self.unsigned_because()

    def _outside(self, groups: list[str]) -> str | None:
        """Why the person is in none of `groups`, or None when they are in one."""
        if set(self.groups) & set(groups):
            return None
        if not self.listed:
            return f"{self.name} is not in the approvers file"
        mine = ", ".join(self.groups)
        return f"you are in {mine}" if mine else "you are in no group"

    def call(self, quorum: Quorum | None) -> May:
        """A call waiting for a person: under an approver rule (`quorum`), only the people of
        its groups whose answers this web app signs, each once; otherwise anyone."""
        if quorum is None:
            return May(ANYONE, True)
        whom = f"{quorum.needed} of {' or '.join(quorum.groups)}"
        if quorum.own_key:
            whom += ", each with their own key"
        if quorum.own_key:
            why = "this rule takes no answer the web app signs: answer with your own key"
            return May(whom, False, f"{why} (starter approve --key)")
        if self.name in quorum.approvers:
            return May(whom, False, "you have approved it (the same person counts once)")
        why_not = self._refusal(quorum.groups)
        return May(whom, why_not is None, why_not or "")

    def budget(self, budget: BudgetStatus) -> May:
        """A run at its token budget: with the worker's AGENT_BUDGET_GROUPS, only their people,
        with a signed grant; otherwise anyone."""
        if not budget.groups:
            return May(ANYONE, True)
        why_not = self._refusal(budget.groups)
        return May(who_may(budget.groups), why_not is None, why_not or "")

    def question(self) -> May:
        """A question the model asked: anyone may answer it."""
        return May(ANYONE, True)


def viewer(
    name: str | None,
    *,
    local: bool,
    approvers: ApproversFile | None,
    key: SigningKey | None,
) -> Viewer:
    """The viewer of a page; the approvers file is the signing key's when none is given."""
    if approvers is None and key is not None:
        approvers = key.approvers
    return Viewer(name, local, approvers, None if local else key)
