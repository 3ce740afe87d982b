"""The payload converter of every client, worker and replayer: pydantic's, plus one rule.

A workflow input that cannot even be read as JSON of the right shape (nested too deeply for the
JSON parser, say) fails inside the converter, before any model validator runs; the SDK would then
fail the workflow task again and again ("Failed decoding arguments"). Here any failure to decode
an `AgentRunInput` becomes the run's own failure, `InvalidAgentRunInput: …`, like every other
invalid input.

And it notes on an `AgentRunInput` whether the codec, holding keys, found it unencrypted: a run
started in plaintext (before the deployment had a key, or by a client without one) is not an
encrypted run, so its signals are not refused for being plaintext, now or on a replay by a
worker that has a key since. It also keeps the seal record the codec found inside a sealed
input (`workflows.contract.seal`), so the workflow can refuse an input sealed for another workflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.exceptions import ApplicationError

from workflows.contract.seal import SEAL_METADATA
from workflows.model import AgentRunInput, describe_validation
from workflows.names import PLAINTEXT_METADATA


class AgentPayloadConverter(PydanticPayloadConverter):
    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        try:
            values = super().from_payloads(payloads, type_hints)
        except (ValidationError, ValueError, RecursionError) as err:
            if type_hints is None or AgentRunInput not in type_hints:
                raise
            detail = describe_validation(err) if isinstance(err, ValidationError) else str(err)
            raise ApplicationError(
                f"Invalid AgentRunInput: {detail}", type="InvalidAgentRunInput", non_retryable=True
            ) from None
        for index, value in enumerate(values):
            wanted = type_hints[index] if type_hints and index < len(type_hints) else None
            if wanted is AgentRunInput and not isinstance(value, AgentRunInput):
                # e.g. a payload store reference left unloaded (stored for another workflow)
                raise ApplicationError(
                    f"Invalid AgentRunInput: a {type(value).__name__} is not a run's input",
                    type="InvalidAgentRunInput",
                    non_retryable=True,
                )
        for payload, value in zip(payloads, values, strict=False):
            if isinstance(value, AgentRunInput) and PLAINTEXT_METADATA in payload.metadata:
                value._arrived_in_plaintext = True
            elif isinstance(value, AgentRunInput) and SEAL_METADATA in payload.metadata:
                value._sealed_for = {SEAL_METADATA: payload.metadata[SEAL_METADATA]}
        return values
