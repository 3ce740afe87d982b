"""Who signs what the terminal sends (`approve`, `reject`, `answer`, `reask`, `grant`): the person
whose own key the terminal holds (`--key FILE`, else AGENT_SIGNING_KEY, else `~/.ssh/id_ed25519`
when the approvers file lists it; `runtime.signing_key.find_signing_key`). `USER`, `LOGNAME` and
`--approver` play no part in a signed answer. Without a key the answer goes unsigned, named by
`--approver` or the operating-system user, and the command says so in one line (stderr)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from runtime.setting_error import SettingError
from runtime.settings import Settings
from runtime.signing_key import SigningKey, find_signing_key
from starter.errors import EXIT_USAGE, CliError
from starter.follow import default_approver
from starter.output import Output
from starter.render import visible
from starter.signed_answer import UNSIGNED


@dataclass(frozen=True)
class Signer:
    """The terminal's signer: its key (None: unsigned) and who the answer names."""

    key: SigningKey | None
    approver: str
    unsigned: str | None = None
    """Why nothing is signed (no key): what a refusal for want of a signature names."""

    def plainly(self, refusal: str) -> str:
        """The workflow's refusal of this answer, saying what was missing when it went unsigned
        and was refused as not from someone who may (`only ops may approve …`): one line."""
        if self.key is not None or self.unsigned is None or not refusal.startswith("only "):
            return refusal
        return f"{refusal}: this terminal signed nothing: {self.unsigned}"


def terminal_signer(args: argparse.Namespace, out: Output, what: str = "the answer") -> Signer:
    """The key and the approver of one command (a key that cannot be used: exit 2, one line)."""
    given = getattr(args, "approver", None)
    try:
        found = find_signing_key(getattr(args, "key", None), Settings.read())
    except SettingError as err:
        raise CliError(str(err), code=EXIT_USAGE) from None
    key = found.key
    if key is not None and key.person is not None:
        if given is not None and given != key.person:
            raise CliError(
                f"--approver {visible(given)}: {what} is signed with {key.path}, which is"
                f" {key.person}'s key; leave --approver out",
                code=EXIT_USAGE,
            )
        return Signer(key, key.person)
    unsigned = found.unsigned or "no key"
    out.info(f"{what} goes unsigned ({UNSIGNED}): {unsigned}")
    return Signer(None, given or default_approver(), unsigned)
