"""`AgentPlugin` used exactly as docs/embedding.md shows it: the page's example is the file
`docs/embedding_example.py`, run here as its own process against the dev server, with a tool of
its own called by the model (the OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid

from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.reliability.processes import ROOT

EXAMPLE = ROOT / "docs" / "embedding_example.py"
PAGE = ROOT / "docs" / "embedding.md"


def test_the_page_shows_the_example_file_as_it_is():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert EXAMPLE.read_text() in blocks


async def test_the_documented_example_runs_a_tool_of_its_own(client, tmp_path):
    with FakeOpenAI() as fake:
        fake.enqueue(
            tool_calls(("call_1", "word_count", '{"text": "to be or not"}')),
            text("There are 4 words."),
        )
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))
        }
        env.update(
            {
                "TEMPORAL_ADDRESS": client.service_client.config.target_host,
                "AGENT_TASK_QUEUE": f"embed-{uuid.uuid4().hex[:8]}",
                "AGENT_WORKSPACE": str(tmp_path / "ws"),
                "AGENT_STATE_DIR": str(tmp_path / "state"),
                "LLM_BASE_URL": fake.base_url,
                "LLM_API_KEY": "sk-test",
                "PYTHONPATH": str(ROOT),
            }
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLE),
            "How many words are in 'to be or not'?",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        requests = list(fake.requests)
    assert process.returncode == 0, err.decode()
    assert out.decode().strip().splitlines()[-1] == "There are 4 words."
    offered = [t["function"]["name"] for t in requests[0]["tools"]]
    assert offered[-1] == "word_count" and "list_dir" in offered
    results = [m["content"] for m in requests[1]["messages"] if m["role"] == "tool"]
    assert [json.loads(r) for r in results] == [{"ok": True, "data": 4}]
