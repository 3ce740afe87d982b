"""A run that closes without a `finished` event (terminated): both followers say so and stop,
instead of waiting forever; the live follower falls back to the durable event log."""

from __future__ import annotations

import pytest

from starter.follow import follow, follow_by_polling
from starter.output import Output
from tests.fakes import FakeAgentActivities, calls
from tests.helpers import start_run, wait_for_phase, worker_for
from workflows.model import AgentRunInput


@pytest.mark.parametrize("follower", [follow, follow_by_polling])
async def test_a_terminated_run_ends_the_follower(client, task_queue, capsys, follower):
    fake = FakeAgentActivities(replies=[calls(("c1", "delete_path", "{}"))])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.terminate("test")
        followed = await follower(client, handle.id, Output())
    assert (followed.finish_reason, followed.closed_status) == (None, "TERMINATED")
    printed = capsys.readouterr()
    assert "awaiting_approval" in printed.out
    assert "run ended without a finished event: TERMINATED" in printed.out + printed.err
