"""Edit on approval: the call that runs is the person's arguments in the model's form.

Pure; no Temporal import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from workflows.model import ToolCall


@dataclass(frozen=True)
class Edit:
    call: ToolCall
    """The call as it runs: the same id and tool, the person's arguments."""
    original_arguments: Any
    """The arguments the model gave."""


def edited_call(call: ToolCall, arguments: dict[str, Any]) -> Edit:
    """The call with the person's arguments, in the model's form: JSON text when the model sent
    text (as chat models do), else the object."""
    shown: Any = (
        json.dumps(arguments, ensure_ascii=False) if isinstance(call.arguments, str) else arguments
    )
    return Edit(
        call=call.model_copy(update={"arguments": shown}), original_arguments=call.arguments
    )
