"""The fair floor's activities: what one agent round costs outside the project, done by the bare
workflow's two steps with plain `httpx`, `json` and `os` and nothing of the project (no import of
`activities`, `workflows`, `runtime` or `starter`: `tests/unit/test_bench_floor.py` checks it), so
that every cost of the agent's own code (its model client, its tool runner, its models) shows in
the figures' ratios.

Step A makes the agent's model call: the same streamed chat-completions request to the same fake
model server, with the agent's headers and the JSON body the agent sent at that round (so the same
bytes), reads the event stream to its end (so the connection goes back to the pool, as the
agent's client does) and returns the reply as a plain dict. Step B lists the workspace with
`os.scandir` and returns the JSON text of the envelope the agent's `list_dir` returns
(`{"ok": true, "data": [...]}`), in the activity itself (the agent's tool hands the listing to a
thread so that its heartbeats keep going: that hand-off counts as the agent's).

The bodies come from a reference agent run the figure made first: the fake model server keeps the
requests it was sent (`GET /bench/recent`) and the figure writes that run's bodies to a JSON file
(`save_record`), which the activity reads once, when the first floor round runs. Each round's body
is held parsed and encoded again for every request, as any client encodes its request;
`json.dumps` gives the agent's bytes back (checked when the record is read, and the figures
compare the floor's requests with the agent's at the server).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from temporalio import activity

from bench.bare_workflow import ACTIVITY_STEP_A, ACTIVITY_STEP_B, StepInput

TIMEOUT = httpx.Timeout(120.0, connect=15.0)
"""The agent's default (`LLM_TIMEOUT_SECONDS`, a 15 s connect)."""


def save_record(path: Path, bodies: list[str]) -> None:
    """Write a reference run's request bodies (JSON texts, one a round) for the floor, atomically:
    a worker may be reading."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(bodies))
    tmp.replace(path)


def encode(body: dict[str, Any]) -> bytes:
    """A request body's bytes, encoded as the agent's client encodes its own."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


def load_record(path: Path) -> list[dict[str, Any]]:
    """The bodies of a record, parsed; each must encode back to the bytes the agent sent."""
    bodies: list[dict[str, Any]] = []
    for round_, text in enumerate(json.loads(path.read_text())):
        body = json.loads(text)
        if encode(body) != text.encode("utf-8"):
            raise ValueError(f"round {round_}'s body does not encode back to the agent's bytes")
        bodies.append(body)
    return bodies


def request_headers(api_key: str | None) -> dict[str, str]:
    """The headers the agent's client sends with a streamed request."""
    headers = {
        "Accept": "text/event-stream",
        "Accept-Encoding": "gzip, deflate",
        "Content-Type": "application/json",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


async def read_reply(response: httpx.Response) -> dict[str, Any]:
    """A streamed chat completion read to the end of its body: the reply as plain JSON
    (`message` with its text and tool calls, `finish_reason`, `usage`)."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] | None = None
    done = False
    async for line in response.aiter_lines():
        if done or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                held = calls.setdefault(
                    call.get("index", 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                held["id"] = call.get("id") or held["id"]
                function = call.get("function") or {}
                held["function"]["name"] += function.get("name") or ""
                held["function"]["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if not done and finish is None:
        raise RuntimeError("the model's stream ended before it finished")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"message": message, "finish_reason": finish, "usage": usage}


def listing(folder: Path) -> str:
    """The agent's `list_dir` of `folder` as its tool message carries it: name, kind (file, dir
    or symlink, links not followed) and size of each entry, by name."""
    entries: list[dict[str, Any]] = []
    with os.scandir(folder) as scan:
        for entry in sorted(scan, key=lambda e: e.name):
            if entry.is_symlink():
                kind, size = "symlink", None
            elif entry.is_dir(follow_symlinks=False):
                kind, size = "dir", None
            else:
                kind, size = "file", entry.stat(follow_symlinks=False).st_size
            entries.append({"name": entry.name, "kind": kind, "size": size})
    return json.dumps({"ok": True, "data": entries}, ensure_ascii=False)


class FairFloor:
    """Step A and step B of the bare workflow: the agent's model request and its `list_dir`.
    `base_url` is the model server's (`…/v1`), `workspace` the folder the agent's tool lists."""

    def __init__(self, base_url: str, api_key: str | None, workspace: Path, record_path: Path):
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = request_headers(api_key)
        self._workspace = workspace
        self._record_path = record_path
        self._bodies: list[dict[str, Any]] | None = None
        self._http = httpx.AsyncClient()

    async def __aenter__(self) -> FairFloor:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._http.aclose()

    def body(self, round_: int) -> dict[str, Any]:
        """The body the agent sent at `round_` (the record is read at the first call)."""
        if self._bodies is None:
            self._bodies = load_record(self._record_path)
        if round_ >= len(self._bodies):
            raise ValueError(f"the record has {len(self._bodies)} rounds, not round {round_}")
        return self._bodies[round_]

    def activities(self) -> list[Callable[..., Any]]:
        # Named for `bench.profile_causes`, which finds them in a profile's stacks.
        @activity.defn(name=ACTIVITY_STEP_A)
        async def floor_model_call(step: StepInput) -> dict[str, Any]:
            payload = encode(self.body(step.round))
            async with self._http.stream(
                "POST", self._url, content=payload, headers=self._headers, timeout=TIMEOUT
            ) as response:
                response.raise_for_status()
                return await read_reply(response)

        @activity.defn(name=ACTIVITY_STEP_B)
        async def floor_list_dir(step: StepInput) -> str:
            return listing(self._workspace)

        return [floor_model_call, floor_list_dir]


def check_same_requests(agent: list[dict[str, str]], floor: list[dict[str, str]]) -> None:
    """Raise unless the floor's model requests are the agent's, round by round: the same head
    (request line and headers) and the same body bytes, as the model server received them
    (`FakeLlmServer.recent`)."""
    if len(agent) != len(floor):
        raise RuntimeError(f"the floor made {len(floor)} model requests, the agent {len(agent)}")
    for round_, (a, f) in enumerate(zip(agent, floor, strict=True)):
        for part in ("head", "body"):
            if a[part] != f[part]:
                raise RuntimeError(
                    f"the floor's request {part} at round {round_} is not the agent's:"
                    f" {f[part][:300]!r} against {a[part][:300]!r}"
                )
