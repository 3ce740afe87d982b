"""Drive runs ONLY through the `temporal` CLI (the user contract of docs/interface.md), with an in-process
worker running AgentWorkflow and fake activities. Every client call below is a CLI subprocess.

The commands (plus `--address <dev server> --namespace default` on each):

    temporal workflow start --type AgentWorkflow --task-queue Q --workflow-id W \
        --input '{"messages":[{"role":"user","content":"Please delete the logs folder"}]}'
    temporal workflow query --workflow-id W --name status --output json
    temporal workflow signal --workflow-id W --name tool_approval \
        --input '{"call_id":"call_1","approved":true}'
    temporal workflow update execute --workflow-id W --name submit_approval \
        --input '{"call_id":"nope","approved":true}'          # rejected: exit code 1
    temporal workflow update execute --workflow-id W --name submit_approval \
        --input '{"call_id":"call_2","approved":false,"reason":"not now"}' --output json
    temporal workflow query --workflow-id W --name events --input 5 --output json
    temporal workflow result --workflow-id W --output json
    temporal workflow signal --workflow-id W2 --name cancel --input '{"reason":"changed my mind"}'
    temporal workflow describe --workflow-id W2 --output json

Output formats used (temporal CLI 1.x, `--output json`):
- `workflow query` prints `{"queryResult": [<the query's value>]}`, where an empty list shows as
  `null` though the payload holds `[]` (seen in CI: `"pending_approvals": null` while the run was
  `running`; see test_cli_prints_an_empty_list_as_null);
- `workflow update execute` prints `{"name": ..., "updateId": ..., "result": <the returned value>}`;
  a rejected update exits with code 1 and prints `Error: unable to update workflow: <why>` on
  stderr;
- `workflow result` prints `{"status": "COMPLETED", ..., "result": <AgentRunResult>}`;
- `workflow describe` prints `{"workflowExecutionInfo": {"status": "WORKFLOW_EXECUTION_STATUS_…"}}`.
Without `--output json`, `query` prints a `QueryResult  <compact JSON>` line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, status, wait_until, worker_for

TEMPORAL = str(Path(sys.executable).parent / "temporal")


class Cli:
    def __init__(self, address: str) -> None:
        self.address = address

    async def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            TEMPORAL,
            *args,
            "--address",
            self.address,
            "--namespace",
            "default",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        code = proc.returncode or 0
        if check and code != 0:
            raise AssertionError(f"temporal {' '.join(args)} failed ({code}): {err.decode()}")
        return code, out.decode(), err.decode()

    async def start(self, task_queue: str, workflow_id: str, run_input: str) -> None:
        await self.run(
            "workflow",
            "start",
            "--type",
            "AgentWorkflow",
            "--task-queue",
            task_queue,
            "--workflow-id",
            workflow_id,
            "--input",
            run_input,
        )

    async def json(self, *args: str) -> Any:
        _, out, _ = await self.run(*args, "--output", "json")
        return json.loads(out)

    async def query(self, workflow_id: str, name: str, *extra: str) -> Any:
        answer = await self.json(
            "workflow", "query", "--workflow-id", workflow_id, "--name", name, *extra
        )
        return answer["queryResult"][0]


async def test_cli_approve_reject_and_cancel(client):
    cli = Cli(client.service_client.config.target_host)
    queue = f"cli-{uuid.uuid4()}"
    wid = f"cli-run-{uuid.uuid4()}"
    fake = FakeAgentActivities(
        replies=[
            calls(("call_1", "delete_path", '{"path": "logs"}')),
            calls(("call_2", "run_command", '{"command": "rm -rf /tmp/x"}')),
            text("The logs folder is deleted."),
        ]
    )
    async with worker_for(client, queue, fake):
        await cli.start(
            queue, wid, '{"messages":[{"role":"user","content":"Please delete the logs folder"}]}'
        )

        async def awaiting(call_id: str) -> Any:
            st = await cli.query(wid, "status")
            # `--output json` prints an empty list inside a query result as null
            ids = [c["id"] for c in st["pending_approvals"] or []]
            return st if st["phase"] == "awaiting_approval" and ids == [call_id] else None

        st = await wait_until(lambda: awaiting("call_1"))
        assert st["pending_approvals"][0]["name"] == "delete_path"
        assert st["round"] == 0 and st["cancel_requested"] is False

        # plain-output query: a `QueryResult` line with compact JSON
        _, plain, _ = await cli.run("workflow", "query", "--workflow-id", wid, "--name", "status")
        assert "QueryResult" in plain and '"phase":"awaiting_approval"' in plain

        await cli.run(
            "workflow",
            "signal",
            "--workflow-id",
            wid,
            "--name",
            "tool_approval",
            "--input",
            '{"call_id":"call_1","approved":true}',
        )
        await wait_until(lambda: awaiting("call_2"))

        code, _, err = await cli.run(
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            wid,
            "--name",
            "submit_approval",
            "--input",
            '{"call_id":"nope","approved":true}',
            check=False,
        )
        assert code != 0 and "unknown call id 'nope'" in err

        update = await cli.json(
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            wid,
            "--name",
            "submit_approval",
            "--input",
            '{"call_id":"call_2","approved":false,"reason":"not now"}',
        )
        assert update["result"] == []

        result = await cli.json("workflow", "result", "--workflow-id", wid)
        assert result["status"] == "COMPLETED"
        run = result["result"]
        assert run["finish_reason"] == "stop" and run["rounds"] == 2
        tools = [m for m in run["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tools] == ["call_1", "call_2"]
        assert tools[1]["content"] == "Rejected: not now"

        after5 = await cli.query(wid, "events", "--input", "5")
        assert after5 and [e["seq"] for e in after5] == list(range(6, 6 + len(after5)))
        assert after5[-1] == {
            "type": "finished",
            "finish_reason": "stop",
            "seq": after5[-1]["seq"],
            "round": 2,
        }
        assert fake.tools_run == ["call_1"]

        # a second run, cancelled from the CLI while it waits
        wid2 = f"cli-run-{uuid.uuid4()}"
        fake.replies = [calls(("call_1", "delete_path", '{"path": "logs"}'))]
        fake.llm_requests.clear()
        await cli.start(
            queue, wid2, '{"messages":[{"role":"user","content":"Please delete the logs folder"}]}'
        )
        await wait_until(
            lambda: _phase_is(cli, wid2, "awaiting_approval"),
        )
        await cli.run(
            "workflow",
            "signal",
            "--workflow-id",
            wid2,
            "--name",
            "cancel",
            "--input",
            '{"reason":"changed my mind"}',
        )
        result2 = await cli.json("workflow", "result", "--workflow-id", wid2)
        assert result2["result"]["finish_reason"] == "cancelled"
        assert result2["result"]["error"] == "Agent run cancelled: changed my mind"
        described = await cli.json("workflow", "describe", "--workflow-id", wid2)
        assert described["workflowExecutionInfo"]["status"].endswith("COMPLETED")
        evs = await cli.query(wid2, "events", "--input", "-1")
        assert [e["type"] for e in evs][-2:] == ["error", "finished"]
        assert evs[-1]["finish_reason"] == "cancelled"
        assert fake.tools_run == ["call_1"]  # nothing ran in the second run


async def _phase_is(cli: Cli, workflow_id: str, phase: str) -> bool:
    return bool((await cli.query(workflow_id, "status"))["phase"] == phase)


async def test_cli_prints_an_empty_list_as_null(client):
    """The README's CLI quirk, pinned: the payload holds `[]`, the CLI prints `null`."""
    cli = Cli(client.service_client.config.target_host)
    queue = f"cli-{uuid.uuid4()}"
    wid = f"cli-run-{uuid.uuid4()}"
    async with worker_for(client, queue, FakeAgentActivities(replies=[text("done")])):
        await cli.start(queue, wid, '"say done"')
        await cli.json("workflow", "result", "--workflow-id", wid)
        handle = client.get_workflow_handle(wid)
        assert (await status(handle)).pending_approvals == []
        assert await events(handle, 1000) == []
        assert (await cli.query(wid, "status"))["pending_approvals"] is None
        assert await cli.query(wid, "events", "--input", "1000") is None
