"""Stand-ins for the real `activities` package, used only while it is missing: an httpx
streaming OpenAI-compatible `call_llm` that reads the conversation through the `messages` query
(as the real one must, since `LlmRequest` is a reference), a workspace `list_dir`, and
`list_tools`. They do the same kind of work, so the overhead figures stay meaningful; the output
says when they were used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client

from bench.stubs import LIST_DIR, RUN_COMMAND
from workflows import names
from workflows.model import ChatMessage, LlmRequest, LlmResponse, ToolCall, ToolRequest, ToolSpec


class FallbackActivities:
    def __init__(self, client: Client, base_url: str, workspace: Path) -> None:
        self._client = client
        self._base_url = base_url
        self._workspace = workspace
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(120.0))

    async def aclose(self) -> None:
        await self._http.aclose()

    def all(self) -> list[Callable[..., Any]]:
        @activity.defn(name=names.ACTIVITY_LIST_TOOLS)
        async def list_tools() -> list[ToolSpec]:
            return [LIST_DIR, RUN_COMMAND]

        @activity.defn(name=names.ACTIVITY_CALL_LLM)
        async def call_llm(request: LlmRequest) -> LlmResponse:
            handle = self._client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
            history = await handle.query(names.QUERY_MESSAGES, result_type=list[ChatMessage])
            return await self.complete(history[: request.message_count])

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            entries = [
                {"name": e.name, "kind": "dir" if e.is_dir() else "file"}
                for e in os.scandir(self._workspace)
            ]
            return json.dumps({"ok": True, "data": entries})

        return [list_tools, call_llm, execute_tool]

    async def complete(self, messages: list[ChatMessage]) -> LlmResponse:
        body = {
            "model": "bench",
            "stream": True,
            "messages": [m.model_dump(exclude_none=True) for m in messages],
        }
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        async with self._http.stream(
            "POST", f"{self._base_url}/chat/completions", json=body
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                activity.heartbeat()
                for choice in json.loads(line[6:]).get("choices", []):
                    delta = choice.get("delta") or {}
                    content.append(delta.get("content") or "")
                    for call in delta.get("tool_calls") or []:
                        slot = calls.setdefault(call["index"], {"id": "", "name": "", "args": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        function = call.get("function") or {}
                        slot["name"] += function.get("name") or ""
                        slot["args"] += function.get("arguments") or ""
        tool_calls = [
            ToolCall(id=c["id"], name=c["name"], arguments=c["args"])
            for _, c in sorted(calls.items())
        ]
        return LlmResponse(message=ChatMessage.assistant("".join(content), tool_calls))
