"""What the worker keeps on disk is bounded and sealed, tried from outside: a real `python
worker.py` with an encryption key runs an approved command, and its state folder holds none of
the command's output in plaintext; a record older than `AGENT_STATE_RETENTION_DAYS` is gone once
the worker has started."""

from __future__ import annotations

import base64
import os
import shutil
import time
import uuid

from temporalio.client import Client

from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from tests.reliability.processes import stopping
from tests.sandbox_support import deployment, deployment_env, run_approving, start_deployed_worker


async def test_an_encrypted_worker_seals_its_records_and_removes_old_ones(
    client: Client, task_queue: str
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    output = f"output-of-the-command-{uuid.uuid4().hex}"
    with deployment() as place:
        records = place.state / "tool-calls"
        records.mkdir(parents=True)
        stale = records / f"{'0' * 64}.json"
        stale.write_text('{"state": "done", "content": "a record from two days ago"}')
        two_days_ago = time.time() - 2 * 86_400
        os.utime(stale, (two_days_ago, two_days_ago))
        env = deployment_env(
            place,
            address=client.service_client.config.target_host,
            task_queue=task_queue,
            llm_base_url=None,
            AGENT_SANDBOX="auto" if shutil.which("bwrap") else "off",
            AGENT_ENCRYPTION_KEY=key,
            AGENT_STATE_RETENTION_DAYS="1",
        )
        worker = await start_deployed_worker(place, env)
        with stopping(worker):
            stale_left = stale.exists()
            keyed = await Client.connect(
                client.service_client.config.target_host,
                data_converter=data_converter({ENV_KEY: key}),
            )
            result = await run_approving(keyed, task_queue, f"run: echo {output}", approvals=1)
        [tool] = [m for m in result.messages if m.role == "tool"]
        assert output in tool.content  # the model got the output
        kept = [p.read_text() for p in records.iterdir()]
    assert [text for text in kept if output in text] == []  # sealed, not plaintext
    assert len(kept) == 1 and '"sealed"' in kept[0]
    assert not stale_left  # removed when the worker started
