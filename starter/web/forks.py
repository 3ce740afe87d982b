"""A fork from the web (`POST /api/runs/{id}/fork {"round"?, "say"?}`, the run page's `Fork from
here`): a new run from the run's record up to the end of a round (`starter.fork`). The original is
only read; the fork is started by this server's client, so with a key it is sealed for its own
run like any run started here."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client

from starter.fork import ForkRefused, fork_run
from starter.run_state import NotReadable
from starter.web import actions

FORK_SHAPE = '{"round"?: N, "say"?: "text"}'


def fork_request(body: Any) -> tuple[int | None, str | None] | str:
    """The round and message a fork request asks for, or why it is no fork request."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        return f"the body must be a JSON object: {FORK_SHAPE}"
    unknown = sorted(set(body) - {"round", "say"})
    if unknown:
        return f"unknown field '{unknown[0]}' (a fork takes round and say)"
    round_, say = body.get("round"), body.get("say")
    if round_ is not None and (isinstance(round_, bool) or not isinstance(round_, int)):
        return "'round' must be a whole number from 0, or null for the whole record"
    if isinstance(round_, int) and round_ < 0:
        return "'round' must be a whole number from 0, or null for the whole record"
    if say is not None and not isinstance(say, str):
        return "'say' must be a string"
    return round_, say


async def fork(client: Client, queue: str, workflow_id: str, body: Any) -> actions.Answer:
    asked = fork_request(body)
    if isinstance(asked, str):
        return 400, {"error": asked}
    round_, say = asked
    try:
        forked = await fork_run(client, workflow_id, task_queue=queue, round=round_, say=say)
    except ForkRefused as err:
        return 400, {"error": str(err)}
    except NotReadable as err:
        return 502, {"error": f"cannot read run '{workflow_id}': {err}"}
    except Exception as err:
        return actions._failure(err, workflow_id)
    return 201, {
        "workflow_id": forked.workflow_id,
        "run_id": forked.run_id,
        "forked_from": forked.forked_from.model_dump(mode="json"),
        "messages": forked.messages,
        "waiting": forked.waiting,
    }
