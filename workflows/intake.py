"""Signal and update payloads come in raw: decoding them here turns anything that does not
decode into a complaint the workflow reports as a `warning` (or a refusal), never a failed
workflow task. Validation of the decoded value is `workflows.inputs`."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow
from temporalio.common import RawValue

from workflows.bounds import shown


def first_line(err: BaseException) -> str:
    """An exception in one short line (never the whole input it may quote)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return shown(f"{type(err).__name__}: {first}" if first else type(err).__name__, 300)


def decode(args: Sequence[RawValue], *, optional: bool) -> tuple[object, str | None]:
    """The one payload of a signal or update, decoded loosely (any JSON), or what was wrong."""
    if not args:
        return None, None if optional else "no payload given"
    if len(args) > 1:
        return None, f"expected one payload, got {len(args)}"
    try:
        return workflow.payload_converter().from_payload(args[0].payload), None
    except Exception as err:  # any undecodable payload is bad input, not a bug
        return None, f"payload could not be decoded ({first_line(err)})"
