"""`python -m starter run --system` and `cancel --reason` as real processes against the dev server
and a worker with the real activities: the system prompt is the run's first message, and a
cancel carries its reason and the operating-system user who asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli import test_starter
from tests.cli.test_starter import Agent, new_id, start_waiting
from tests.helpers import events, messages, of_type

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model


async def signals_sent(agent: Agent, workflow_id: str, name: str) -> list[Any]:
    """The payloads of the signals `name` the run received, as its history holds them."""
    history = await agent.handle(workflow_id).fetch_history()
    sent: list[Any] = []
    for event in history.events:
        if event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == name:
                sent += await agent.client.data_converter.decode(signal.input.payloads)
    return sent


async def test_run_with_a_system_prompt_from_text_or_a_file(agent: Agent, tmp_path: Path) -> None:
    workflow_id = new_id()
    given = await agent.cli(
        "run", "--no-follow", "--id", workflow_id, "--system", "Answer in one line.", "list"
    )
    assert given.code == 0, given
    await agent.handle(workflow_id).result()
    history = await messages(agent.handle(workflow_id))
    assert [(m.role, m.content) for m in history[:2]] == [
        ("system", "Answer in one line."),
        ("user", "list"),
    ]

    prompt_file = tmp_path / "system.txt"
    prompt_file.write_text("After a tool response, answer in plain text.\nBe brief.\n")
    workflow_id = new_id()
    from_file = await agent.cli(
        "run", "--no-follow", "--id", workflow_id, "--system", f"@{prompt_file}", "list"
    )
    assert from_file.code == 0, from_file
    await agent.handle(workflow_id).result()
    first = (await messages(agent.handle(workflow_id)))[0]
    assert (first.role, first.content) == (
        "system",
        "After a tool response, answer in plain text.\nBe brief.",
    )

    missing = await agent.cli("run", "--no-follow", "--system", f"@{tmp_path}/nope.txt", "list")
    assert missing.code == 2
    assert missing.stderr.strip().splitlines() == [
        f"error: --system @{tmp_path}/nope.txt: cannot read {tmp_path}/nope.txt:"
        " No such file or directory"
    ]


async def test_cancel_sends_its_reason_and_who_asked(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete notes.txt", "call_2")
    done = await agent.cli(
        "cancel", workflow_id, "--reason", "changed my mind", USER="erin", LOGNAME="erin"
    )
    assert done.code == 0, done
    await agent.handle(workflow_id).result()
    [sent] = await signals_sent(agent, workflow_id, "cancel")
    assert (sent["reason"], sent["requested_by"]) == ("changed my mind", "erin")


async def test_the_reason_of_a_cancel_is_in_the_error_event_and_the_result(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete notes.txt", "call_2")
    done = await agent.cli("cancel", workflow_id, "--reason", "changed my mind")
    assert done.code == 0, done
    result = await agent.handle(workflow_id).result()
    assert result.finish_reason == "cancelled"
    assert result.error is not None and "changed my mind" in result.error
    [error] = of_type(await events(agent.handle(workflow_id)), "error")
    assert "changed my mind" in error.message
    assert (agent.workspace / "notes.txt").exists()
