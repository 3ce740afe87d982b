"""A session that loops in one turn, through the real `python -m starter` against the session
dev server and a worker with the real activities and the scripted model: the turn stops at its
round limit with a warning `history` shows, and `say` still reaches the session, which answers."""

from __future__ import annotations

from tests.cli import test_starter
from tests.cli.test_starter import Agent, new_id
from tests.helpers import events, of_type, status, wait_for_phase, wait_until

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model


async def test_a_turn_at_its_round_limit_leaves_the_session_open_to_say(agent: Agent) -> None:
    workflow_id = new_id()
    started = await agent.cli(
        "run", "--no-follow", "--keep-alive", "--max-rounds", "1", "--id", workflow_id, "list"
    )
    assert started.code == 0, started
    handle = agent.handle(workflow_id)
    await wait_for_phase(handle, "waiting_for_message")
    warned = [w.message for w in of_type(await events(handle), "warning")]
    assert any("this turn stopped at its round limit (max_rounds 1)" in w for w in warned)

    said = await agent.cli("say", workflow_id, "hello")
    assert said.code == 0, said
    assert f"message sent to {workflow_id}" in said.stdout

    async def answered() -> bool:
        texts = of_type(await events(handle), "text_delta")
        return (await status(handle)).phase == "waiting_for_message" and len(texts) == 1

    await wait_until(answered)
    history = await agent.cli("history", workflow_id)
    assert history.code == 0, history
    assert f"run {workflow_id}: waiting_for_message" in history.stdout
    assert "this turn stopped at its round limit (max_rounds 1)" in history.stdout
    assert "  user: hello" in history.stdout
    await agent.cli("cancel", workflow_id)
    assert (await handle.result()).finish_reason == "cancelled"
