"""The web server over HTTP (httpx against uvicorn on 127.0.0.1, the dev server and a production
worker): sign-in, sessions, CSRF, API tokens, the approver a client cannot choose, local mode, the
JSON API and its server-sent events, and `add-user` / `web` as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from starter.web.auth import SESSION_COOKIE, UsersFile, check_password
from tests.fake_openai import text
from tests.helpers import events, of_type, status, wait_for_phase, wait_until
from tests.web.conftest import PASSWORD, Served, Worker, serve_web
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, AgentStatus, ChatMessage

pytestmark = pytest.mark.web

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
async def served(
    client: Client, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    async with serve_web(
        client, worker.queue, tmp_path_factory.mktemp("web"), signed_in=True
    ) as served:
        yield served


@pytest.fixture(scope="module")
async def local(
    client: Client, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    async with serve_web(
        client, worker.queue, tmp_path_factory.mktemp("local"), signed_in=False
    ) as served:
        yield served


async def start(client: Client, worker: Worker, prompt: str) -> WorkflowHandle[Any, AgentRunResult]:
    return await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt),
        id=f"agent-http-{uuid.uuid4().hex[:10]}",
        task_queue=worker.queue,
        result_type=AgentRunResult,
    )


async def sign_in(http: httpx.AsyncClient, name: str = "alice", password: str = PASSWORD) -> str:
    """Sign in through the form; returns the CSRF token of the new session (from the page)."""
    response = await http.post("/signin", data={"username": name, "password": password})
    assert response.status_code == 303, response.text
    page = await http.get("/")
    assert page.status_code == 200
    marker = 'name="csrf-token" content="'
    start_at = page.text.index(marker) + len(marker)
    return page.text[start_at : page.text.index('"', start_at)]


async def test_sign_in_sets_a_signed_httponly_strict_cookie(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        page = await http.get("/signin")
        assert page.status_code == 200
        for label in ('for="username">Username<', 'for="password">Password<', ">Sign in<"):
            assert label in page.text
        response = await http.post("/signin", data={"username": "alice", "password": PASSWORD})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert "httponly" in flags
        assert "samesite=strict" in flags
        assert "path=/" in flags
        inbox = await http.get("/")
        assert inbox.status_code == 200 and "signed in as <b>alice</b>" in inbox.text
        assert "local mode" not in inbox.text
        # A cookie changed by the client is not a session.
        value = http.cookies[SESSION_COOKIE]
        http.cookies.set(SESSION_COOKIE, value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
        assert (await http.get("/api/pending")).status_code == 401


async def test_a_wrong_name_and_a_wrong_password_get_the_same_401(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        wrong_password = await http.post("/signin", data={"username": "alice", "password": "x"})
        wrong_name = await http.post("/signin", data={"username": "mallory", "password": "x"})
        assert wrong_password.status_code == wrong_name.status_code == 401
        assert "wrong username or password" in wrong_password.text
        assert wrong_password.text == wrong_name.text
        assert SESSION_COOKIE not in http.cookies
        # Another site's form cannot sign this browser in (as the attacker's account).
        foreign = await http.post(
            "/signin",
            data={"username": "alice", "password": PASSWORD},
            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
        assert foreign.status_code == 403 and SESSION_COOKIE not in http.cookies


async def test_repeated_failures_for_a_name_slow_every_further_attempt(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        for _ in range(5):
            response = await http.post("/signin", data={"username": "bob", "password": "nope"})
            assert response.status_code == 401
        for password in ("still wrong", PASSWORD):
            began = time.monotonic()
            response = await http.post("/signin", data={"username": "bob", "password": password})
            assert time.monotonic() - began >= 1.0
        assert response.status_code == 303  # the right password still works, after the wait


async def test_without_a_session_nothing_is_shown_or_changed(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        page = await http.get("/")
        assert page.status_code == 303 and page.headers["location"].startswith("/signin")
        assert (await http.get("/api/pending")).status_code == 401
        created = await http.post("/api/runs", json={"prompt": "run: echo hi"})
        assert created.status_code == 401
        assert created.json() == {"error": "sign in required"}


async def test_a_change_needs_the_sessions_csrf_token(client: Client, served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        token = await sign_in(http)
        missing = await http.post("/api/runs", json={"prompt": "run: echo hi"})
        assert missing.status_code == 403 and "CSRF" in missing.json()["error"]
        wrong = await http.post(
            "/api/runs", json={"prompt": "run: echo hi"}, headers={"X-CSRF-Token": "x" + token}
        )
        assert wrong.status_code == 403
        created = await http.post(
            "/api/runs", json={"prompt": "list"}, headers={"X-CSRF-Token": token}
        )
        assert created.status_code == 201
        body = created.json()
        assert set(body) == {"workflow_id", "run_id"}
        assert created.headers["location"] == f"/runs/{body['workflow_id']}"
        result = await client.get_workflow_handle(body["workflow_id"]).result()
        assert result["finish_reason"] == "stop"
        # Every form of the pages carries the token.
        page = (await http.get("/")).text
        assert page.count('name="csrf_token"') >= 2
        assert page.count(f'value="{token}"') == page.count('name="csrf_token"')
        # Signing out is a change too: the form's token, then the cookie is gone.
        assert (await http.post("/signout")).status_code == 403
        out = await http.post("/signout", data={"csrf_token": token})
        assert out.status_code == 303 and SESSION_COOKIE not in http.cookies
        assert (await http.get("/api/pending")).status_code == 401


async def test_a_bearer_token_answers_and_the_approver_is_its_user(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await start(client, worker, "run: echo token")
    status = await wait_for_phase(handle, "awaiting_approval")
    call_id = status.pending_approvals[0].id
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        assert (await http.get("/api/pending")).status_code == 200
        chosen = await http.post(
            f"/api/runs/{handle.id}/approvals",
            json={"call_id": call_id, "approved": True, "approver": "the-ceo"},
        )
        assert chosen.status_code == 400 and "approver" in chosen.json()["error"]
        assert of_type(await events(handle), "approval") == []  # nothing recorded
        taken = await http.post(
            f"/api/runs/{handle.id}/approvals", json={"call_id": call_id, "approved": True}
        )
        assert taken.status_code == 200 and taken.json() == {"pending": []}
        again = await http.post(
            f"/api/runs/{handle.id}/approvals", json={"call_id": call_id, "approved": True}
        )
        assert again.status_code == 409
        assert again.json() == {"error": f"call '{call_id}' was already answered"}
    [answer] = of_type(await events(handle), "approval")
    assert answer.approver == "alice"
    async with httpx.AsyncClient(
        base_url=served.url, headers={"Authorization": "Bearer not-a-token"}
    ) as http:
        assert (await http.get("/api/pending")).status_code == 401


async def test_reopen_through_the_api(client: Client, worker: Worker, served: Served) -> None:
    """`POST /api/runs/W/reopen {"call_id"}`: a call that has not expired is refused with the
    workflow's reason (409), a bad body is a 400, and an expired call is asked again as the
    token's user."""
    waiting = await start(client, worker, "run: echo waiting")
    status = await wait_for_phase(waiting, "awaiting_approval")
    call_id = status.pending_approvals[0].id
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        url = f"/api/runs/{waiting.id}/reopen"
        refused = await http.post(url, json={"call_id": call_id})
        assert refused.status_code == 409
        assert refused.json()["error"].startswith(f"call '{call_id}' has not expired")
        for body, why in (
            ({"call_id": call_id, "approver": "the-ceo"}, "'approver' is set by the server"),
            ({"call_id": ""}, "'call_id' must be a non-empty string"),
            ({"call_id": call_id, "deadline": 5}, "unknown field 'deadline'"),
            (["x"], "the body must be a JSON object"),
        ):
            bad = await http.post(url, json=body)
            assert bad.status_code == 400 and why in bad.json()["error"], bad.text
        assert of_type(await events(waiting), "approval_reopened") == []
        await waiting.terminate("test over")

        expiring = await client.start_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt(
                "run: echo later", AgentRunOptions(approval_timeout_seconds=1)
            ),
            id=f"agent-http-{uuid.uuid4().hex[:10]}",
            task_queue=worker.queue,
            result_type=AgentRunResult,
        )
        [call_id] = (await wait_for_phase(expiring, "approval_expired")).expired
        taken = await http.post(f"/api/runs/{expiring.id}/reopen", json={"call_id": call_id})
        assert taken.status_code == 200, taken.text
        assert taken.json()["call_id"] == call_id and taken.json()["deadline"]
        [reopened] = of_type(await events(expiring), "approval_reopened")
        assert reopened.approver == "alice"
        await expiring.terminate("test over")


async def test_a_session_cannot_choose_the_approver_either(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await start(client, worker, "run: echo session")
    status = await wait_for_phase(handle, "awaiting_approval")
    call_id = status.pending_approvals[0].id
    async with httpx.AsyncClient(base_url=served.url) as http:
        token = await sign_in(http, "bob")
        headers = {"X-CSRF-Token": token}
        url = f"/api/runs/{handle.id}/approvals"
        body = {"call_id": call_id, "approved": False, "reason": "no", "approver": "alice"}
        assert (await http.post(url, json=body, headers=headers)).status_code == 400
        del body["approver"]
        assert (await http.post(url, json=body, headers=headers)).status_code == 200
    result = await handle.result()
    assert result.finish_reason == "stop"
    [answer] = of_type(await events(handle), "approval")
    assert (answer.approved, answer.reason, answer.approver) == (False, "no", "bob")


async def test_the_json_api_and_its_server_sent_events(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await start(client, worker, "run: echo api")
    await wait_for_phase(handle, "awaiting_approval")
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as http:

        async def listed() -> list[dict[str, Any]]:
            found = (await http.get("/api/pending")).json()
            return [r for r in found if r["workflow_id"] == handle.id]

        [entry] = await wait_until(listed)
        # The objects `python -m starter pending --json` prints.
        assert set(entry) == {
            "workflow_id",
            "run_id",
            "awaiting_since",
            "pending_count",
            "pending",
            "expired",
            "decided",
            "questions",
            "quorums",
            "details",
            "pins",
        }
        assert entry["run_id"] == handle.result_run_id
        assert entry["pending"][0]["name"] == "run_command"
        call_id = entry["pending"][0]["id"]
        run = (await http.get(f"/api/runs/{handle.id}")).json()
        assert run["status"]["phase"] == "awaiting_approval"
        assert run["messages"][0] == {
            "role": "user",
            "content": "run: echo api",
            "name": None,
            "tool_calls": None,
            "tool_call_id": None,
        }
        assert [e["type"] for e in run["events"]] == ["tool_call", "awaiting_approval"]

        async def read_stream(headers: dict[str, str]) -> list[tuple[int, dict[str, Any]]]:
            got: list[tuple[int, dict[str, Any]]] = []
            seq = -1
            async with http.stream("GET", f"/api/runs/{handle.id}/events", headers=headers) as s:
                assert s.headers["content-type"].startswith("text/event-stream")
                async for line in s.aiter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        got.append((seq, json.loads(line[6:])))
            return got  # the server closed the stream

        following = asyncio.create_task(read_stream({}))
        await asyncio.sleep(0.5)
        assert not following.done()  # still open while the run waits
        answered = await http.post(
            f"/api/runs/{handle.id}/approvals", json={"call_id": call_id, "approved": True}
        )
        assert answered.status_code == 200
        streamed = await asyncio.wait_for(following, 30)
        assert [seq for seq, _ in streamed] == list(range(len(streamed)))
        assert all(seq == event["seq"] for seq, event in streamed)
        assert streamed[-1][1]["type"] == "finished"
        resumed = await read_stream({"Last-Event-ID": "2"})
        assert [event for _, event in resumed] == [event for _, event in streamed[3:]]
        # A finished run refuses answers, with the reason.
        late = await http.post(
            f"/api/runs/{handle.id}/approvals", json={"call_id": call_id, "approved": True}
        )
        assert late.status_code == 409 and "finished" in late.json()["error"]
        missing = await http.get("/api/runs/agent-no-such-run")
        assert missing.status_code == 404
    async with httpx.AsyncClient(base_url=served.url) as http:
        await sign_in(http)
        page = await http.get("/runs/agent-no-such-run")
        assert page.status_code == 404 and "No run with id" in page.text


async def test_cancel_and_messages_through_the_api(
    client: Client, worker: Worker, served: Served
) -> None:
    from workflows.model import AgentRunOptions

    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt("hello", AgentRunOptions(keep_alive=True)),
        id=f"agent-http-{uuid.uuid4().hex[:10]}",
        task_queue=worker.queue,
        result_type=AgentRunResult,
    )
    await wait_for_phase(handle, "waiting_for_message")
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        bad = await http.post(
            f"/api/runs/{handle.id}/messages", json={"role": "system", "content": "x"}
        )
        assert bad.status_code == 400
        sent = await http.post(f"/api/runs/{handle.id}/messages", json={"content": "list"})
        assert sent.status_code == 200

        async def answered() -> bool:
            status = await handle.query("status", result_type=AgentStatus)
            history = await handle.query("messages", result_type=list[ChatMessage])
            users = [m.content for m in history if m.role == "user"]
            return users == ["hello", "list"] and status.phase == "waiting_for_message"

        await wait_until(answered)  # the scripted assistant listed the workspace
        cancelled = await http.post(
            f"/api/runs/{handle.id}/cancel", json={"reason": "done here", "immediate": True}
        )
        assert cancelled.status_code == 200
    result = await handle.result()
    assert result.finish_reason == "cancelled"
    assert [m.content for m in result.messages if m.role == "user"] == ["hello", "list"]


async def test_local_mode_says_so_and_refuses_other_sites(client: Client, local: Served) -> None:
    async with httpx.AsyncClient(base_url=local.url) as http:
        page = await http.get("/")
        assert page.status_code == 200 and "local mode" in page.text
        assert "local-os-user" in page.text
        assert (await http.get("/signin")).status_code == 303  # nobody signs in
        for headers in (
            {"Origin": "http://evil.example"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
            {"Origin": "null"},
        ):
            refused = await http.post("/api/runs", json={"prompt": "list"}, headers=headers)
            assert refused.status_code == 403, headers
            assert "another site" in refused.json()["error"]
        own = await http.post(
            "/api/runs",
            json={"prompt": "list"},
            headers={"Origin": local.url, "Sec-Fetch-Site": "same-origin"},
        )
        assert own.status_code == 201
        await client.get_workflow_handle(own.json()["workflow_id"]).result()
        # A name of another site made to resolve to 127.0.0.1 (DNS rebinding) reads nothing.
        rebound = await http.get("/api/pending", headers={"Host": "evil.example"})
        assert rebound.status_code == 403
        assert (await http.get("/", headers={"Host": "localhost:1"})).status_code == 200


def run_starter(
    args: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_local_mode_refuses_a_public_bind() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_WEB_USERS_FILE"}
    env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"  # never reached: it stops before connecting
    done = run_starter(["web", "--host", "0.0.0.0", "--port", "0"], env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "AGENT_WEB_USERS_FILE" in lines[0], done.stderr


def test_add_user_writes_a_salted_scrypt_line_and_prints_the_token_last(tmp_path: Path) -> None:
    users = tmp_path / "users"
    env = {**os.environ, "AGENT_WEB_USERS_FILE": str(users)}
    first = run_starter(["web", "add-user", "dana", "--token"], env, stdin="s3cret pass\n")
    assert first.returncode == 0, first.stderr
    token = first.stdout.strip().splitlines()[-1]
    assert len(token) >= 32 and " " not in token
    second = run_starter(["web", "add-user", "erin"], env, stdin="other pass\n")
    assert second.returncode == 0, second.stderr
    lines = users.read_text().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["dana", "erin"]
    assert all(line.split(":", 1)[1].startswith("scrypt$") for line in lines)
    assert token not in users.read_text() and "s3cret" not in users.read_text()
    read = UsersFile(users).users()
    assert check_password("s3cret pass", read["dana"].password_hash)
    assert not check_password("s3cret pas", read["dana"].password_hash)
    assert UsersFile(users).by_token(token).name == "dana"  # type: ignore[union-attr]
    # The same password for another user gives another hash (a random salt).
    third = run_starter(["web", "add-user", "frank"], env, stdin="other pass\n")
    assert third.returncode == 0
    hashes = {line.split(":", 1)[1] for line in users.read_text().splitlines()}
    assert len(hashes) == 3
    assert run_starter(["web", "add-user", "bad:name"], env, stdin="x\n").returncode == 2


async def test_a_run_terminated_while_waiting_leaves_the_inbox(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await start(client, worker, "run: echo terminated")
    await wait_for_phase(handle, "awaiting_approval")
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as http:

        async def listed() -> bool:
            found = (await http.get("/api/pending")).json()
            return any(r["workflow_id"] == handle.id for r in found)

        await wait_until(listed)
        # Its search attributes still say awaiting_approval, and its status query still
        # answers so (from its last state): only the run's own status shows it is closed.
        await handle.terminate("gone")

        async def gone() -> bool:
            return not await listed()

        await wait_until(gone, timeout=15)
        # Its page and its event stream say it was terminated, and offer no answer.
        live = f"/runs/{handle.id}/live?after=-1&piece=0&v=-1"

        async def closed() -> dict[str, Any] | None:
            body = (await http.get(live)).json()
            return body if body["done"] else None

        body = await wait_until(closed, timeout=15)
        assert 'data-phase="closed">terminated<' in body["parts"]["phase"]
        assert "data-call-id" not in body["parts"]["calls"]
        async with http.stream("GET", f"/api/runs/{handle.id}/events") as stream:
            lines = [line async for line in stream.aiter_lines()]
        assert "event: closed" in lines
        assert 'data: {"closed": "terminated"}' in lines


async def test_the_web_command_serves_until_sigterm(client: Client, worker: Worker) -> None:
    """`python -m starter web` as its own process: local mode on loopback, the JSON API, and a
    clean exit 0 on SIGTERM."""
    env = {k: v for k, v in os.environ.items() if k != "AGENT_WEB_USERS_FILE"}
    env |= {
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "AGENT_TASK_QUEUE": worker.queue,
    }
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "web", "--port", "0",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        banner = (await asyncio.wait_for(server.stdout.readline(), 30)).decode()
        assert "local mode" in banner, banner
        url = banner.split(" at ", 1)[1].split()[0].rstrip("/")
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            body = {"prompt": "list", "options": {"max_rounds": 3}}
            created = await http.post("/api/runs", json=body)
            assert created.status_code == 201, created.text
            invalid = await http.post("/api/runs", json={"prompt": "list", "options": []})
            assert invalid.status_code == 400 and "options" in invalid.json()["error"]
            result = await client.get_workflow_handle(created.json()["workflow_id"]).result()
            assert result["finish_reason"] == "stop"
            assert "local mode" in (await http.get(created.headers["location"])).text
    finally:
        server.terminate()
        code = await asyncio.wait_for(server.wait(), 30)
    assert code == 0
    assert server.stderr is not None
    assert (await server.stderr.read()).decode().strip() == ""


def _add_user_at_a_terminal(users: Path, name: str, answers: list[str]) -> tuple[int, str]:
    """`web add-user NAME` with a terminal (a pseudo-terminal as its controlling tty)."""
    command = [sys.executable, "-m", "starter", "web", "add-user", name]
    done = subprocess.run(
        [sys.executable, "-m", "tests.web.tty_driver", json.dumps(answers), *command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "AGENT_WEB_USERS_FILE": str(users)},
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return int(result["code"]), str(result["output"])


def test_add_user_at_a_terminal_asks_twice(tmp_path: Path) -> None:
    users = tmp_path / "users"
    code, output = _add_user_at_a_terminal(users, "gina", ["one secret", "another"])
    assert code == 2 and "differ" in output, output
    assert not users.exists()
    code, output = _add_user_at_a_terminal(users, "gina", ["one secret", "one secret"])
    assert code == 0, output
    assert "one secret" not in output  # not echoed
    assert check_password("one secret", UsersFile(users).users()["gina"].password_hash)


async def test_every_inbox_viewer_reads_one_shared_poll(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await start(client, worker, "run: echo shared")
    await wait_for_phase(handle, "awaiting_approval")
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as http:

        async def listed() -> bool:
            body = (await http.get("/inbox/live?v=-1")).json()
            return handle.id in (body["html"] or "")

        await wait_until(listed)
        inbox = served.web.inbox
        polls, lists = inbox.polls, served.polls.calls["list"]
        statuses = served.polls.calls["query:status"]

        async def viewer() -> None:
            for _ in range(10):
                assert (await http.get("/inbox/live?v=-1")).status_code == 200

        await asyncio.gather(*(viewer() for _ in range(20)))  # 200 page refreshes
        polled = inbox.polls - polls
        # One visibility listing per poll, whoever looks; never one per page refresh.
        assert served.polls.calls["list"] - lists in (polled, polled + 1)
        assert polled < 50
        assert served.polls.calls["query:status"] - statuses < 50 * 10
    await handle.terminate("test over")


async def test_a_call_the_model_wrote_as_text_says_so_on_its_card(
    client: Client, worker: Worker, served: Served
) -> None:
    """The model writes its call in `<tool_call>` markers (with the doubled braces of its chat
    template): the worker reads it as the call, and the inbox card says it was read from the
    model's text; a call the server sent as a call does not."""
    worker.fake.enqueue(
        text('<tool_call>{{"name": "run_command", "arguments": {"command": "echo t"}}}</tool_call>')
    )
    from_text = await start(client, worker, "run something")
    await wait_for_phase(from_text, "awaiting_approval")  # it took the queued reply
    native = await start(client, worker, "run: echo native")
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as http:
        try:
            cards: dict[str, str] = {}
            for handle in (from_text, native):
                await wait_for_phase(handle, "awaiting_approval")
                live = f"/runs/{handle.id}/live?after=-1&piece=0&v=-1"

                async def card(live: str = live) -> str | None:
                    calls = str((await http.get(live)).json()["parts"]["calls"])
                    return calls if "data-call-id" in calls else None

                cards[handle.id] = await wait_until(card, timeout=15)
            assert 'data-from-text="true"' in cards[from_text.id]
            assert "read from the model" in cards[from_text.id]
            assert "data-from-text" not in cards[native.id]
            [pending] = (await status(from_text)).pending_approvals
            assert pending.from_text is True
        finally:
            for handle in (from_text, native):
                await handle.terminate("test over")
