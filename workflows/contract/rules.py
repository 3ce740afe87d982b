"""The approval policy's data: rules, a run's policy, the worker's policy, the `policy` view.

Plain pydantic v2, strict: a rule with an unknown field, an unknown `decision`, no `tool` or a
pattern that is not a string is refused whole, so a typo never silently loosens a policy. The
evaluation lives in `workflows.gate.policy`; this module only says what a valid rule is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    model_serializer,
    model_validator,
)

Decision = Literal["allow", "deny", "ask"]
Origin = Literal["enforced", "run", "default"]

MAX_RULES = 200
"""A list of rules (a run's, the worker's enforced or default ones) holds at most this many."""
MAX_PATTERN_CHARS = 1_000
"""A glob (`tool`, or a `when` value) and an argument name are at most this long."""
MAX_WHEN_ARGUMENTS = 32
"""A rule's `when` names at most this many arguments."""
MAX_RULE_REASON_CHARS = 2_000
"""A rule's `reason` is at most this long (as long as a person's answer may give)."""
MAX_POLICY_BYTES = 256_000
"""A list of rules takes at most this much as JSON: it travels with the run across
continue-as-new, beside the conversation, and must leave that hand-over room."""
DEFAULT_DENY_REASON = "Denied by policy"
"""The reason of a `deny` rule that gives none."""

Pattern = Annotated[StrictStr, Field(max_length=MAX_PATTERN_CHARS)]
MAX_GROUPS = 32
"""An approver rule, or an answer, names at most this many groups."""
MAX_APPROVERS = 100
"""An approver rule asks for at most this many people."""
GroupName = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._@+-]{1,64}$")]
"""A group's name: 1-64 of A-Z a-z 0-9 . _ @ + - (as a user's name)."""


class Approvers(BaseModel):
    """Who must approve a call an `ask` rule sends to people: `count` distinct people of these
    groups, each with a signed answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: Annotated[tuple[GroupName, ...], Field(min_length=1, max_length=MAX_GROUPS)]
    count: Annotated[StrictInt, Field(ge=1, le=MAX_APPROVERS)] = 1
    own_key: StrictBool = Field(default=False, exclude_if=lambda value: not value)
    """Each vote must be signed with the person's own key: a vote a signing service (the web
    app) signed for them is refused, so not even the service's operator can stand in."""


class PolicyRule(BaseModel):
    """One rule: which calls it matches (`tool`, `when`) and what it decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: Annotated[StrictStr, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]
    """A case-sensitive glob (`fnmatch`) over the tool's name."""
    when: Annotated[dict[Pattern, Pattern], Field(max_length=MAX_WHEN_ARGUMENTS)] | None = None
    """Argument name → glob over its value; every listed argument must be present and match."""
    decision: Decision
    reason: Annotated[StrictStr, Field(max_length=MAX_RULE_REASON_CHARS)] | None = None
    approvers: Approvers | None = None
    """With `decision: "ask"` only: who must approve (`count` people of `groups`, signed)."""

    @model_validator(mode="after")
    def _approvers_only_ask(self) -> PolicyRule:
        if self.approvers is not None and self.decision != "ask":
            raise ValueError(
                f"'approvers' is only taken with decision \"ask\", not {self.decision!r}"
            )
        return self

    @model_serializer(mode="wrap")
    def _without_approvers(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A rule without approvers reads as before (in the `policy` view, the memo, the state).
        data = handler(self)
        if isinstance(data, dict) and data.get("approvers", 0) is None:
            del data["approvers"]
        return data


Rules = Annotated[list[PolicyRule], Field(max_length=MAX_RULES)]


def _check_size(rules: list[PolicyRule], what: str) -> None:
    size = sum(len(rule.model_dump_json()) + 1 for rule in rules)
    if size > MAX_POLICY_BYTES:
        raise ValueError(f"{what} take {size} bytes as JSON, more than {MAX_POLICY_BYTES}")


class ApprovalPolicy(BaseModel):
    """A run's rules, `{"rules": [...]}`: `options.approval_policy`, `set_approval_policy`."""

    model_config = ConfigDict(extra="forbid")

    rules: Rules

    @model_validator(mode="after")
    def _bounded(self) -> ApprovalPolicy:
        _check_size(self.rules, "the rules")
        return self


class WorkerPolicy(BaseModel):
    """The worker's rules (its `AGENT_POLICY_FILE`): `enforced` ones come before every run's
    rules, so no run can loosen them; `defaults` apply where neither decides."""

    model_config = ConfigDict(extra="forbid")

    enforced: Rules = Field(default_factory=list)
    defaults: Rules = Field(default_factory=list)

    @model_validator(mode="after")
    def _bounded(self) -> WorkerPolicy:
        _check_size(self.enforced, "the enforced rules")
        _check_size(self.defaults, "the default rules")
        return self


class PolicyEntry(PolicyRule):
    """A rule as the `policy` query shows it: with where it comes from."""

    origin: Origin


class PolicyView(BaseModel):
    """The `policy` query's answer: the effective rules in evaluation order. A rule's index
    here is the `rule` an `approval` event names."""

    rules: list[PolicyEntry]
