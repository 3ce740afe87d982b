"""The agent inside your own worker, with a tool of your own: `python docs/embedding_example.py`.

Reads the same settings as `worker.py` (LLM_BASE_URL, AGENT_WORKSPACE, AGENT_MCP_CONFIG, …;
TEMPORAL_ADDRESS, default localhost:7233), starts one run, prints the agent's last answer.
"""

import asyncio
import os
import sys
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.tools import Tool
from runtime.settings import Settings
from worker import AgentPlugin
from workflows.model import AgentRunInput
from workflows.run.agent import AgentWorkflow


async def count_words(arguments: dict[str, Any]) -> int:
    return len(str(arguments.get("text", "")).split())


WORD_COUNT = Tool(
    name="word_count",
    description="Count the words of a text.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    run=count_words,
    requires_approval=False,  # True: a person answers before it runs
    safe_to_retry=True,  # False: it runs at most once per call
)


async def main(prompt: str) -> None:
    plugin = AgentPlugin(tools=[WORD_COUNT], settings=Settings.from_env())
    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    client = await Client.connect(address, plugins=[plugin])  # the agent's data converter
    queue = os.environ.get("AGENT_TASK_QUEUE", "my-app")
    # The client's plugin gives this worker AgentWorkflow, its activities and their tuning.
    async with Worker(client, task_queue=queue):
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentRunInput.from_prompt(prompt),
            id=f"my-app-{uuid.uuid4()}",
            task_queue=queue,
        )
    print(result.messages[-1].content, flush=True)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "How many words are in 'to be or not'?"))
    os._exit(0)  # skips a known SDK crash at interpreter shutdown
