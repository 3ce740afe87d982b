"""The `model_unreachable` signal (what `call_llm` sends when the model server cannot be reached)
is a `warning` event only while a model call is in flight: sent while the run waits for a person
it changes nothing, and one without a message is named as ignored. The workflow on the real dev
server, with scripted activities (the subject is the workflow's handling of the signal)."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, start_run, wait_for_phase, wait_until, worker_for
from workflows import names
from workflows.model import AgentRunInput

SAID = "model server http://127.0.0.1:9 cannot be reached (connection refused): attempt 1 failed"


async def warnings_of(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [e.message for e in await events(handle) if e.type == "warning"]


async def test_the_notice_is_a_warning_only_while_the_model_is_asked(
    client: Client, task_queue: str
) -> None:
    fake = FakeAgentActivities(replies=[text("slow hello")], llm_delay=3.0)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hi"))
        await wait_until(lambda: fake.llm_requests, timeout=20)
        await handle.signal(names.SIGNAL_MODEL_UNREACHABLE, {"message": SAID})
        assert await wait_until(lambda: warnings_of(handle)) == [SAID]
        await handle.result()


async def test_the_notice_is_ignored_while_no_model_call_runs(
    client: Client, task_queue: str
) -> None:
    fake = FakeAgentActivities(replies=[calls(("c1", "delete_path", '{"path": "logs"}'))])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(names.SIGNAL_MODEL_UNREACHABLE, {"message": SAID})
        await handle.signal(names.SIGNAL_MODEL_UNREACHABLE, {"text": "no message"})
        said = await wait_until(lambda: warnings_of(handle))
        assert said == ["model_unreachable: no message; ignored"]
        await handle.terminate("test over")
