"""The built-in tools and `execute_tool`'s envelope rules, on a real temporary workspace."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client

from activities.agent_activities import AgentActivities
from activities.tools import Tool, ToolRegistry, build_default_registry
from runtime.settings import Settings
from workflows.model import ToolRequest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "logs" / "a.log").write_text("alpha\n")
    (ws / "logs" / "b.log").write_text("beta\n")
    (ws / "notes.txt").write_text("remember the milk\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (ws / "link_out").symlink_to(outside, target_is_directory=True)
    (ws / "link_out_file").symlink_to(outside / "secret.txt")
    (ws / "link_in").symlink_to(ws / "notes.txt")
    return ws


def make_settings(workspace: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": None,
        "llm_api_key": None,
        "llm_model": "scripted",
        "workspace": workspace,
        "state_dir": workspace.parent / "state",
    }
    values.update(overrides)
    return Settings(**values)


def make_activities(workspace: Path, registry: ToolRegistry | None = None, **overrides: Any):
    settings = make_settings(workspace, **overrides)
    registry = registry or build_default_registry(workspace, settings.command_timeout_seconds)
    # execute_tool never touches the Temporal client (only call_llm queries the workflow).
    return AgentActivities(cast(Client, None), settings, registry)


async def run(acts: AgentActivities, name: str, arguments: Any, call_id: str = "call_1") -> str:
    return await acts.execute_tool(
        ToolRequest(workflow_id="wf-test", call_id=call_id, name=name, arguments=arguments)
    )


async def run_json(acts: AgentActivities, name: str, arguments: Any, call_id: str = "call_1"):
    return json.loads(await run(acts, name, arguments, call_id))


def test_registry_declares_the_builtin_tools(workspace):
    registry = build_default_registry(workspace)
    specs = {s.name: s for s in registry.specs()}
    assert registry.names == ["list_dir", "read_file", "run_command", "delete_path"]
    assert {n: (s.requires_approval, s.safe_to_retry) for n, s in specs.items()} == {
        "list_dir": (False, True),
        "read_file": (False, True),
        "run_command": (True, False),
        "delete_path": (True, False),
    }
    for spec in specs.values():
        assert spec.parameters["type"] == "object"
        assert spec.description
    assert specs["run_command"].parameters["required"] == ["command"]
    assert registry.get("nope") is None


async def test_list_dir_lists_entries_with_kind_and_size(workspace):
    result = await run_json(make_activities(workspace), "list_dir", {"path": "."})
    assert result["ok"] is True
    entries = {e["name"]: e for e in result["data"]}
    assert set(entries) == {"logs", "notes.txt", "link_out", "link_out_file", "link_in"}
    assert entries["logs"]["kind"] == "dir"
    assert entries["notes.txt"] == {"name": "notes.txt", "kind": "file", "size": 18}
    assert entries["link_out"]["kind"] == "symlink"
    sub = await run_json(make_activities(workspace), "list_dir", '{"path": "logs"}')
    assert [e["name"] for e in sub["data"]] == ["a.log", "b.log"]


async def test_read_file_reads_text_and_follows_links_inside(workspace):
    acts = make_activities(workspace)
    assert await run_json(acts, "read_file", {"path": "notes.txt"}) == {
        "ok": True,
        "data": "remember the milk\n",
    }
    assert (await run_json(acts, "read_file", {"path": "link_in"}))["data"] == "remember the milk\n"
    absolute_inside = str(workspace / "notes.txt")
    assert (await run_json(acts, "read_file", {"path": absolute_inside}))["ok"] is True


@pytest.mark.parametrize("tool", ["list_dir", "read_file", "delete_path"])
@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "logs/../../outside/secret.txt",
        "link_out/secret.txt",
        "link_out",
        "link_out_file",
        "ABSOLUTE",
        "/etc/passwd",
    ],
)
async def test_every_escape_from_the_workspace_is_refused(workspace, tool, path):
    secret = workspace.parent / "outside" / "secret.txt"
    if path == "ABSOLUTE":
        path = str(secret)
    result = await run_json(make_activities(workspace), tool, {"path": path})
    assert result["ok"] is False, result
    assert result["data"] is None
    assert "outside the workspace" in result["error"]
    assert secret.read_text() == "top secret\n"  # nothing outside was touched


@pytest.mark.parametrize("path", [".", "./", "logs/..", "ROOT", "link_root"])
async def test_deleting_the_workspace_root_is_refused(workspace, path):
    (workspace / "link_root").symlink_to(workspace, target_is_directory=True)
    if path == "ROOT":
        path = str(workspace)
    result = await run_json(make_activities(workspace), "delete_path", {"path": path})
    assert workspace.is_dir() and (workspace / "notes.txt").exists()
    if path == "link_root":  # a link to the root: only the link goes
        assert result["data"] == {"path": "link_root", "kind": "symlink", "files": 1}
        assert (workspace / "logs" / "a.log").exists()
    else:
        assert result["ok"] is False
        assert "workspace folder itself" in result["error"]


async def test_delete_path_removes_a_folder_a_file_and_a_link(workspace):
    acts = make_activities(workspace)
    result = await run_json(acts, "delete_path", {"path": "logs"}, "call_1")
    assert result == {"ok": True, "data": {"path": "logs", "kind": "dir", "files": 2}}
    assert not (workspace / "logs").exists()
    link = await run_json(acts, "delete_path", {"path": "link_in"}, "call_2")
    assert link["data"]["kind"] == "symlink"
    assert (workspace / "notes.txt").exists()  # the link went, not its target
    file = await run_json(acts, "delete_path", {"path": "notes.txt"}, "call_3")
    assert file["data"] == {"path": "notes.txt", "kind": "file", "files": 1}
    missing = await run_json(acts, "delete_path", {"path": "nothing-here"}, "call_4")
    assert missing["ok"] is False and "does not exist" in missing["error"]


def test_the_file_tools_declare_their_path_parameter(workspace):
    """Rules see a path parameter normalised, and the worker re-checks its enforced rules
    with the path the tool opens: the file tools say which parameter is a path."""
    registry = build_default_registry(workspace)
    specs = {s.name: s for s in registry.specs()}
    assert {n: s.path_parameters for n, s in specs.items()} == {
        "list_dir": ["path"],
        "read_file": ["path"],
        "run_command": [],
        "delete_path": ["path"],
    }
    for name in ("list_dir", "read_file", "delete_path"):
        tool = registry.get(name)
        assert tool is not None and tool.opened_path is not None
        assert tool.opened_path("./logs//a.log") == "logs/a.log"
    read, delete = registry.get("read_file"), registry.get("delete_path")
    assert read is not None and read.opened_path is not None
    assert delete is not None and delete.opened_path is not None
    assert read.opened_path("link_in") == "notes.txt"  # followed, as read_file follows it
    assert delete.opened_path("link_in") == "link_in"  # the entry itself, as delete_path
    assert read.opened_path(str(workspace / "logs" / "b.log")) == "logs/b.log"


@pytest.mark.parametrize("spelling", [".env/", ".env/.", "./.env/", ".env//", "link_env/"])
@pytest.mark.parametrize("tool", ["read_file", "list_dir", "delete_path"])
async def test_a_file_with_a_trailing_slash_is_refused(workspace, tool, spelling):
    """`.env/` names a folder: the tools refuse it instead of opening the file `.env` under a
    name the rules did not see."""
    (workspace / ".env").write_text("LLM_API_KEY=sk-secret\n")
    (workspace / "link_env").symlink_to(".env")
    result = await run_json(make_activities(workspace), tool, {"path": spelling})
    assert result["ok"] is False, result
    assert "sk-secret" not in json.dumps(result)
    assert (workspace / ".env").exists() and (workspace / "link_env").is_symlink()
    assert "is not a folder" in result["error"] or "not a regular file" in result["error"]


async def test_a_folder_may_end_in_a_slash(workspace):
    acts = make_activities(workspace)
    for spelling in ("logs/", "logs/.", "./logs//"):
        listed = await run_json(acts, "list_dir", {"path": spelling})
        assert [e["name"] for e in listed["data"]] == ["a.log", "b.log"]
    (workspace / "to_logs").symlink_to("logs", target_is_directory=True)
    listed = await run_json(acts, "list_dir", {"path": "to_logs/"})
    assert [e["name"] for e in listed["data"]] == ["a.log", "b.log"]
    gone = await run_json(acts, "delete_path", {"path": "logs/"}, "call_9")
    assert gone == {"ok": True, "data": {"path": "logs", "kind": "dir", "files": 2}}


async def test_read_file_output_is_bounded_with_a_marker(workspace):
    (workspace / "big.txt").write_text("x" * 200_000)
    content = await run(make_activities(workspace), "read_file", {"path": "big.txt"})
    assert len(content) <= 16_000
    data = json.loads(content)["data"]
    assert "truncated" in data
    assert data.startswith("xxxx")


async def test_tool_content_is_bounded_to_16000_characters(workspace):
    async def huge(args: dict[str, Any]) -> str:
        return "y" * 50_000

    registry = ToolRegistry([Tool("huge", "returns a lot", {"type": "object"}, run=huge)])
    content = await run(make_activities(workspace, registry), "huge", {})
    assert len(content) == 16_000
    assert content.endswith("characters]")
    assert "…[truncated" in content


async def test_run_command_runs_in_the_workspace(workspace):
    acts = make_activities(workspace)
    result = await run_json(acts, "run_command", {"command": "pwd; echo oops >&2; exit 3"})
    assert result["ok"] is True
    assert result["data"]["stdout"].strip() == str(workspace.resolve())
    assert result["data"]["stderr"] == "oops\n"
    assert result["data"]["exit_code"] == 3


async def test_run_command_output_is_bounded(workspace):
    acts = make_activities(workspace)
    result = await run_json(
        acts, "run_command", {"command": "head -c 200000 /dev/zero | tr '\\0' a"}
    )
    stdout = result["data"]["stdout"]
    assert stdout.startswith("aaaa")
    assert len(stdout) < 9_000
    assert "truncated" in stdout


async def test_run_command_does_not_see_secrets(workspace, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("SOME_TOKEN", "tok-do-not-leak")
    result = await run_json(make_activities(workspace), "run_command", {"command": "env"})
    assert result["ok"] is True
    assert "PATH=" in result["data"]["stdout"]
    assert "do-not-leak" not in result["data"]["stdout"]


async def test_run_command_times_out_and_kills_the_process_group(workspace):
    acts = make_activities(workspace, command_timeout_seconds=0.5)
    acts._registry = build_default_registry(workspace, 0.5)
    started = time.monotonic()
    result = await run_json(acts, "run_command", {"command": "(sleep 5; touch late.txt) & sleep 5"})
    assert time.monotonic() - started < 4.5
    assert result["ok"] is False
    assert "timed out after 0.5 s" in result["error"]
    await asyncio.sleep(0.2)
    assert not (workspace / "late.txt").exists()


async def test_unknown_tool_is_not_found(workspace):
    assert await run(make_activities(workspace), "nope", {}) == "Tool 'nope' not found"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"path": ', "Invalid tool arguments"),
        ("[1, 2]", "expected a JSON object, got list"),
        ([1, 2], "expected a JSON object, got list"),
        ('"notes.txt"', "expected a JSON object, got str"),
        ({"path": 3}, "argument 'path' must be a string"),
        ({}, "missing required argument 'path'"),
    ],
)
async def test_bad_arguments_give_an_error_envelope(workspace, arguments, expected):
    result = await run_json(make_activities(workspace), "read_file", arguments)
    assert result["ok"] is False
    assert result["data"] is None
    assert expected in result["error"]


async def test_a_raising_tool_gives_a_framework_error(workspace):
    async def broken(args: dict[str, Any]) -> Any:
        raise RuntimeError("disk on fire")

    registry = ToolRegistry([Tool("broken", "raises", {"type": "object"}, run=broken)])
    result = await run_json(make_activities(workspace, registry), "broken", {})
    assert result == {"ok": False, "error": "Framework error: disk on fire", "data": None}


async def test_a_tool_not_safe_to_retry_runs_at_most_once_per_call(workspace):
    runs: list[str] = []

    async def once(args: dict[str, Any]) -> str:
        runs.append(args["x"])
        return f"ran {args['x']}"

    registry = ToolRegistry(
        [Tool("once", "side effect", {"type": "object"}, run=once, safe_to_retry=False)]
    )
    acts = make_activities(workspace, registry)
    first = await run(acts, "once", {"x": "a"}, "call_1")
    again = await run(acts, "once", {"x": "a"}, "call_1")
    other = await run(acts, "once", {"x": "b"}, "call_2")
    assert runs == ["a", "b"]
    assert json.loads(first) == {"ok": True, "data": "ran a"}
    assert again == first  # the recorded result, not a second run
    assert json.loads(other)["data"] == "ran b"
    markers = list((workspace.parent / "state" / "tool-calls").iterdir())
    assert len(markers) == 2
    assert not any(p.name.startswith("tool-calls") for p in workspace.iterdir())


async def test_an_interrupted_attempt_is_not_run_again(workspace):
    started = asyncio.Event()
    runs = 0

    async def slow(args: dict[str, Any]) -> str:
        nonlocal runs
        runs += 1
        started.set()
        await asyncio.sleep(30)
        return "finished"

    registry = ToolRegistry(
        [Tool("slow", "side effect", {"type": "object"}, run=slow, safe_to_retry=False)]
    )
    acts = make_activities(workspace, registry)
    task = asyncio.create_task(run(acts, "slow", {}, "call_9"))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = json.loads(await run(acts, "slow", {}, "call_9"))
    assert runs == 1
    assert result["ok"] is False
    assert "interrupted" in result["error"] and "not run again" in result["error"]
    # The same call id in another workflow is another key.
    assert acts._markers.claim("other-wf", "call_9", "slow") is None


def test_settings_from_env(tmp_path):
    env = {
        "LLM_BASE_URL": "http://127.0.0.1:9/v1/",
        "LLM_API_KEY": "sk-very-secret",
        "AGENT_WORKSPACE": str(tmp_path / "w"),
        "LLM_STREAM": "false",
    }
    settings = Settings.from_env(env)
    assert settings.llm_base_url == "http://127.0.0.1:9/v1"
    assert settings.llm_model == "gpt-4o-mini"
    assert settings.llm_stream is False
    assert settings.workspace.is_dir()
    assert settings.resolved_state_dir == tmp_path / ".agent-state"
    assert "sk-very-secret" not in repr(settings)
    assert settings.provider == "openai-compatible"
    scripted = Settings.from_env({"LLM_BASE_URL": "", "AGENT_WORKSPACE": str(tmp_path / "w")})
    assert scripted.llm_base_url is None and scripted.provider == "scripted"
    assert scripted.llm_stream is True
    with pytest.raises(ValueError, match="outside AGENT_WORKSPACE"):
        Settings.from_env(
            {"AGENT_WORKSPACE": str(tmp_path / "w"), "AGENT_STATE_DIR": str(tmp_path / "w/s")}
        )
    with pytest.raises(ValueError, match="AGENT_COMMAND_TIMEOUT_SECONDS"):
        Settings.from_env(
            {"AGENT_WORKSPACE": str(tmp_path / "w"), "AGENT_COMMAND_TIMEOUT_SECONDS": "soon"}
        )
    assert os.environ.get("LLM_API_KEY") != "sk-very-secret"


# ---- races, hard links and long paths ----


class Swapper:
    """A thread that keeps swapping the folder `ws/d` for a symlink to `outside` and back."""

    def __init__(self, ws: Path, outside: Path) -> None:
        self.ws, self.outside = ws, outside
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        folder, link, saved = self.ws / "d", self.ws / "d.link", self.ws / "d.saved"
        while not self.stop.is_set():
            link.symlink_to(self.outside, target_is_directory=True)
            os.rename(folder, saved)
            os.rename(link, folder)  # `d` is now the symlink out
            os.rename(folder, link)
            os.rename(saved, folder)  # `d` is the folder again
            link.unlink()
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def racy(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f.txt").write_text("inside\n")
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    (outside / "only-outside.txt").write_text("x")
    return ws, outside


async def test_a_symlink_swapped_in_mid_call_never_leads_out(racy):
    ws, outside = racy
    acts = make_activities(ws)
    seen: Counter[str] = Counter()
    with Swapper(ws, outside) as swapper:
        for i in range(3000):
            if i % 3 == 2:
                result = await run_json(acts, "list_dir", {"path": "d"})
                names = [e["name"] for e in result["data"] or []]
                seen["listed outside" if "only-outside.txt" in names else "listed"] += 1
            else:
                result = await run_json(acts, "read_file", {"path": "d/f.txt"})
                seen[str(result["data"] if result["ok"] else "refused")] += 1
    assert swapper.swaps > 10
    assert seen["OUTSIDE\n"] == 0, seen
    assert seen["listed outside"] == 0, seen
    assert seen["inside\n"] > 0 and seen["refused"] > 0, seen  # both states were met


def plant_inside(folder: Path, name: str) -> None:
    """Create `folder/name` only if `folder` is the real folder right now (never through the
    symlink the swapper puts there)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


async def test_delete_never_removes_a_file_outside_during_a_swap(racy):
    ws, outside = racy
    acts = make_activities(ws)
    victim_outside = outside / "victim.txt"
    deleted = 0
    with Swapper(ws, outside):
        for i in range(500):
            victim_outside.write_text("keep me")
            plant_inside(ws / "d", "victim.txt")
            result = await run_json(acts, "delete_path", {"path": "d/victim.txt"}, f"call_{i}")
            deleted += result["ok"]
            assert victim_outside.exists(), (i, result)
    assert deleted > 0


async def test_a_hard_link_to_a_file_outside_is_refused(workspace):
    secret = workspace.parent / "outside" / "secret.txt"
    os.link(secret, workspace / "hard")
    result = await run_json(make_activities(workspace), "read_file", {"path": "hard"})
    assert result["ok"] is False
    assert "has 2 hard links" in result["error"] and "refused" in result["error"]
    assert "top secret" not in json.dumps(result)


@pytest.mark.parametrize("tool", ["list_dir", "read_file", "delete_path"])
@pytest.mark.parametrize(
    "path",
    ["a" * 5000, "logs/" + "b" * 300, "/".join(["x"] * 3000), "logs/" + "c/" * 2500],
    ids=["long-name", "long-inner-name", "deep", "deep-missing"],
)
async def test_a_long_path_gives_a_short_relative_error(workspace, tool, path):
    result = await run_json(make_activities(workspace), tool, {"path": path})
    assert result["ok"] is False and result["data"] is None
    error = result["error"]
    assert str(workspace.parent) not in error
    assert "Framework error" not in error
    assert len(error) < 200, error
    assert "too long" in error or "does not exist" in error


async def test_a_path_nested_too_deep_is_refused(workspace):
    deep = workspace / "/".join(["n"] * 260)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("deep")
    path = "/".join(["n"] * 260) + "/f.txt"
    result = await run_json(make_activities(workspace), "read_file", {"path": path})
    assert result["ok"] is False
    assert "nested more than 256 folders deep" in result["error"]
    assert len(result["error"]) < 200
    shallow = "/".join(["n"] * 200)
    assert (await run_json(make_activities(workspace), "list_dir", {"path": shallow}))["ok"] is True
