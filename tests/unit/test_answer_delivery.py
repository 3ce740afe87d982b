"""An answer the server turned down because the worker never processed it is sent again, under
a new update id (it was not applied); the workflow's own refusal is not. The many-watchers test
(tests/cli/test_starter_many_watchers.py) met the server's refusal under load, once in six runs;
here the update's outcome is given, as the SDK raises it."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from starter.handle import AgentHandle

UNPROCESSED = (
    "Workflow Update is rejected because it wasn't processed by worker. Probably, Workflow Update"
    " is not supported by the worker."
)


class Raw:
    """The SDK's handle, answering each update with the next failure, then `[]`."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.ids: list[str] = []

    async def execute_update(self, update: str, payload: Any, *, id: str, result_type: Any) -> Any:
        self.ids.append(id)
        if self.failures:
            raise self.failures.pop(0)
        return []


class NoClient:
    def get_workflow_handle(self, *args: Any, **kwargs: Any) -> None:
        return None


def handle_with(raw: Raw) -> AgentHandle:
    handle = AgentHandle(NoClient(), "W")  # type: ignore[arg-type]
    handle.raw = raw  # type: ignore[assignment]
    return handle


async def test_an_answer_the_worker_never_processed_is_sent_again() -> None:
    raw = Raw(WorkflowUpdateFailedError(ApplicationError(UNPROCESSED)))
    pending = await handle_with(raw).answer({"call_id": "call_1", "approved": True}, patience=20)
    assert pending == []
    assert len(raw.ids) == 2 and raw.ids[0] != raw.ids[1]


async def test_the_workflows_own_refusal_is_not_sent_again() -> None:
    refused = ApplicationError("call 'call_9' is not waiting", type="InvalidApproval")
    raw = Raw(WorkflowUpdateFailedError(refused))
    with pytest.raises(WorkflowUpdateFailedError):
        await handle_with(raw).answer({"call_id": "call_9", "approved": True}, patience=20)
    assert len(raw.ids) == 1
