"""The ASGI application: the inbox and run pages (server-rendered), their live updates, the JSON
API and sign-in. `build_app` takes a connected client, so tests and `python -m starter web`
serve the same thing."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from runtime.approvers import ApproversFile
from runtime.signing_key import SigningKey
from starter.audit_table import counts_line, dropped_line, tokens_line
from starter.handle import AgentHandle
from starter.render import (
    age,
    answer_text,
    audit_action,
    audit_arguments,
    decided_by,
    event_line,
    moment,
)
from starter.request_guards import MIB, AsciiHeaders, LimitedBody, LoopbackHostOnly
from starter.runs import PAGE_SIZE as RUNS_PAGE_SIZE
from starter.runs import STATUSES, BadFilter, RunRow, list_runs, parse_filter
from starter.web import actions, forks, grants, people, what_if_page
from starter.web.actions import SignedAction
from starter.web.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_SECONDS,
    TOO_MANY_ATTEMPTS,
    WRONG_CREDENTIALS,
    Signer,
    Throttle,
    TooManyAttempts,
    UsersFile,
    verify,
)
from starter.web.hub import Inbox, RunWatch, Watches
from starter.web.page_links import cursor_of, page_link
from starter.web.paths import SegmentedPath, path_as_sent, segment, workflow_id_of
from starter.web.run_counts import OpenRunCounts
from starter.web.security import Guard, Identity, SecurityHeaders, cross_site
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.model import ToolCall
from workflows.shown import ELLIPSIS, arguments_display, shorten, text_block, visible

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1 * MIB
"""The largest request body read (`LimitedBody`); a larger one is refused with 413."""
LOCAL_MODE_HOST = "local mode answers only to a loopback host name"
SSE_PING_SECONDS = 15.0

Handler = Callable[[Request], Awaitable[Response]]


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("starter.web", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["cut"] = lambda text, limit=500: shorten(text, limit, ELLIPSIS)
    env.filters["args"] = arguments_display
    env.filters["visible"] = visible
    env.filters["text"] = text_block
    env.filters["q"] = lambda value: segment(str(value))
    env.filters["digest"] = arguments_digest
    env.filters["age"] = age
    env.filters["iso"] = lambda value: value.isoformat() if value else ""
    env.filters["when"] = moment
    env.filters["audit_args"] = audit_arguments
    env.filters["decided_by"] = decided_by
    env.filters["answer"] = answer_text
    env.filters["audit_action"] = audit_action
    env.globals["counts_line"] = counts_line
    env.globals["tokens_line"] = tokens_line
    env.globals["dropped_line"] = dropped_line
    env.globals["uid"] = lambda *parts: hashlib.sha256(
        "\0".join(map(str, parts)).encode()
    ).hexdigest()[:12]
    return env


def run_ended(watch: RunWatch) -> bool:
    """Whether the run is over (finished, or closed by Temporal): its page then offers no
    `Cancel run` and no `Send`. A watch that failed (`cannot watch: …`) says nothing of the run."""
    state = watch.state
    if state.status is not None and state.status.phase == "finished":
        return True
    return bool(state.closed) and not str(state.closed).startswith("cannot")


class WebApp:
    """The application's state: the client, the shared polls and the sign-in machinery."""

    def __init__(
        self,
        client: Client,
        *,
        queue: str,
        guard: Guard,
        signing_key: SigningKey | None = None,
        approvers: ApproversFile | None = None,
    ) -> None:
        self.client = client
        self.queue = queue
        self.guard = guard
        self.inbox = Inbox(client)
        self.watches = Watches(client)
        self.run_counts = OpenRunCounts(client)
        self.runs_page_size = RUNS_PAGE_SIZE
        self.throttle = Throttle()
        self.signing_key = signing_key
        """AGENT_WEB_SIGNING_KEY, the signing service's key: an answer from a signed-in user the
        approvers file lets sign through the service is signed with it (others go unsigned)."""
        self.approvers = approvers
        """AGENT_APPROVERS_FILE (else the signing key's): the signed-in person's groups, and so
        which cards they may answer."""
        self.templates = _templates()

    # ------------------------------------------------------------ plumbing

    def render(self, name: str, request: Request, who: Identity | None, **values: Any) -> str:
        return self.templates.get_template(name).render(
            local=self.guard.local,
            user=who.user if who else None,
            csrf=self.guard.csrf_for(who) if who else "",
            csrf_field=CSRF_FIELD,
            now=datetime.now(UTC),
            viewer=self.viewer(who),
            **values,
        )

    def viewer(self, who: Identity | None) -> people.Viewer:
        """The person a page is for: their groups and the cards they may answer."""
        return people.viewer(
            who.user if who else None,
            local=self.guard.local,
            approvers=self.approvers,
            key=self.signing_key,
        )

    def page(self, handler: Callable[[Request, Identity], Awaitable[Response]]) -> Handler:
        async def guarded(request: Request) -> Response:
            who = self.guard.identify(request)
            if who is None:
                target = quote(path_as_sent(request), safe="")
                return RedirectResponse(f"/signin?next={target}", status_code=303)
            return await handler(request, who)

        return guarded

    def api(
        self, handler: Callable[[Request, Identity], Awaitable[Response]], *, changes: bool
    ) -> Handler:
        async def guarded(request: Request) -> Response:
            who = self.guard.identify(request)
            if who is None:
                return JSONResponse({"error": "sign in required"}, status_code=401)
            if changes:
                refusal = self.guard.change_refusal(request, who)
                if refusal is not None:
                    return JSONResponse({"error": refusal}, status_code=403)
            return await handler(request, who)

        return guarded

    async def json_body(self, request: Request) -> tuple[Any, Response | None]:
        raw = await request.body()  # at most MAX_BODY_BYTES: LimitedBody read it
        if not raw.strip():
            return None, None
        try:
            return json.loads(raw), None
        except ValueError:
            return None, JSONResponse({"error": "the body is not JSON"}, status_code=400)

    # ------------------------------------------------------------ sign-in

    async def signin_page(self, request: Request) -> Response:
        if self.guard.local:
            return RedirectResponse("/", status_code=303)
        return HTMLResponse(
            self.render("signin.html", request, None, error=None, next=_next(request))
        )

    async def signin(self, request: Request) -> Response:
        if self.guard.users is None:
            return RedirectResponse("/", status_code=303)
        refusal = cross_site(request)
        if refusal is not None:  # another site's form would sign this browser in as someone else
            return JSONResponse({"error": refusal}, status_code=403)
        form = parse_qs((await request.body())[:65536].decode(errors="replace"))
        name = (form.get("username") or [""])[0]
        password = (form.get("password") or [""])[0]
        wants_json = "application/json" in request.headers.get("accept", "")
        try:
            user = await verify(self.guard.users, self.throttle, name, password)
        except TooManyAttempts:
            return JSONResponse({"error": TOO_MANY_ATTEMPTS}, status_code=429)
        if user is None:
            if wants_json:
                return JSONResponse({"error": WRONG_CREDENTIALS}, status_code=401)
            page = self.render(
                "signin.html", request, None, error=WRONG_CREDENTIALS, next=_next(request)
            )
            return HTMLResponse(page, status_code=401)
        session, cookie = self.guard.signer.new_session(user)
        target = _next(request, form)
        response: Response = RedirectResponse(target, status_code=303)
        if wants_json:
            response = JSONResponse(
                {"user": user.name, "csrf_token": self.guard.signer.csrf_token(session.sid)}
            )
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def signout(self, request: Request) -> Response:
        """End the session here and on the server: its cookie is refused from now on, also
        when a copy of it is sent from elsewhere."""
        who = self.guard.identify(request)
        if who is not None:
            form = parse_qs((await request.body())[:65536].decode(errors="replace"))
            given = (form.get(CSRF_FIELD) or [""])[0]
            if self.guard.change_refusal(request, who, given):
                return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)
            session = self.guard.session(request)
            if session is not None:
                self.guard.ended.end(session)
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # ------------------------------------------------------------ pages

    async def inbox_page(self, request: Request, who: Identity) -> Response:
        runs = await self.inbox.fresh(max_age=3.0, patience=3.0)
        return HTMLResponse(
            self.render(
                "inbox.html",
                request,
                who,
                runs=runs,
                version=self.inbox.changes.version,
                error=self.inbox.error,
            )
        )

    async def inbox_live(self, request: Request, who: Identity) -> Response:
        """The inbox list when it changed since version `v`, from the shared poll."""
        self.inbox.viewed()
        seen = _int(request.query_params.get("v"), -1)
        version = self.inbox.changes.version
        if seen == version:
            return JSONResponse({"version": version, "html": None, "error": self.inbox.error})
        html = self.render("_calls.html", request, who, runs=self.inbox.runs)
        return JSONResponse({"version": version, "html": html, "error": self.inbox.error})

    async def run_page(self, request: Request, who: Identity) -> Response:
        workflow_id = workflow_id_of(request)
        watch = self.watches.get(workflow_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while watch.state.status is None and not watch.done and loop.time() < deadline:
            await watch.changes.wait(watch.changes.version, 0.5)  # the first look at the run
        if watch.missing:
            page = self.render("missing.html", request, who, workflow_id=workflow_id)
            return HTMLResponse(page, status_code=404)
        return HTMLResponse(self.render("run.html", request, who, **self._run_values(watch)))

    def _run_values(self, watch: RunWatch) -> dict[str, Any]:
        state = watch.state
        status = state.status
        run = watch.waiting
        return {
            "ended": run_ended(watch),
            "workflow_id": watch.workflow_id,
            "status": status,
            "closed": state.closed,
            "trouble": state.trouble,
            "messages": state.messages,
            "events": [(e.seq, event_line(e)) for e in state.events],
            "run": run,
            "version": watch.changes.version,
            "after": watch.last_seq,
            "pieces": len(state.pieces),
            "audit": state.audit,
            "audit_error": state.audit_error,
        }

    async def run_live(self, request: Request, who: Identity) -> Response:
        """What changed on a run's page since the viewer's cursors, from the shared watch."""
        watch = self.watches.get(workflow_id_of(request))
        after = _int(request.query_params.get("after"), -1)
        piece = _int(request.query_params.get("piece"), 0)
        seen = _int(request.query_params.get("v"), -1)
        state = watch.state
        events = [
            {"seq": e.seq, "type": e.type, "round": e.round, "line": event_line(e)}
            for e in state.events
            if e.seq > after
        ]
        pieces = [
            {"round": p.round, "text": p.text, "restart": p.restart} for p in state.pieces[piece:]
        ]
        body: dict[str, Any] = {
            "events": events,
            "pieces": pieces,
            "next_piece": len(state.pieces),
            "version": watch.changes.version,
            "done": watch.done,
            "ended": run_ended(watch),
            "parts": None,
        }
        if seen != watch.changes.version:
            values = self._run_values(watch)
            body["parts"] = {
                "phase": self.render("_phase.html", request, who, **values),
                "conversation": self.render("_conversation.html", request, who, **values),
                "audit": self.render("_audit.html", request, who, **values),
                "calls": self.render(
                    "_calls.html",
                    request,
                    who,
                    runs=[values["run"]] if values["run"] else [],
                    here=True,
                ),
            }
        return JSONResponse(body)

    async def runs_page(self, request: Request, who: Identity) -> Response:
        """Recent runs of the namespace, newest first, filtered by status and workflow id."""
        code, listed = await self._list_runs(request)
        return HTMLResponse(
            self.render("runs.html", request, who, statuses=STATUSES, **listed), status_code=code
        )

    async def _list_runs(self, request: Request) -> tuple[int, dict[str, Any]]:
        """One page of the runs listing for a request (`status`, `q`, `page`): the HTTP status
        and what the page and `GET /api/runs` show."""
        params = request.query_params
        status, text = params.get("status") or "", params.get("q") or ""
        listed: dict[str, Any] = {
            "status": status,
            "q": text,
            "rows": [],
            "next_page": None,
            "scanned": 0,
        }
        try:
            run_filter = parse_filter(status, text)
            cursor = cursor_of(self.guard.signer, run_filter, params.get("page"))
        except BadFilter as err:
            return 400, {**listed, "error": str(err)}
        try:
            page = await list_runs(self.client, run_filter, cursor, page_size=self.runs_page_size)
        except RPCError as err:
            hint = ""
            if err.status == RPCStatusCode.INVALID_ARGUMENT and names.AGENT_STATUS.name in (
                err.message
            ):
                hint = " (start the worker once: it registers the search attributes)"
            return 502, {**listed, "error": f"cannot list runs: {err.message}{hint}"}
        rows = await self.run_counts.fill(page.rows)
        if page.next is not None:
            listed["next_page"] = page_link(self.guard.signer, run_filter, page.next)
            listed["next_href"] = "/runs?" + urlencode(
                {k: v for k, v in (("status", status), ("q", text)) if v}
                | {"page": listed["next_page"]}
            )
        return 200, {**listed, "rows": rows, "scanned": page.scanned, "error": None}

    async def what_if_page(self, request: Request, who: Identity) -> Response:
        """`GET`: the form; `POST` (the form): every recorded call decided again under the
        pasted policy (`starter.web.what_if_page`)."""
        asked = what_if_page.Asked()
        if request.method != "POST":
            page = self.render("what_if.html", request, who, asked=asked, report=None, error=None)
            return HTMLResponse(page)
        form = parse_qs((await request.body()).decode(errors="replace"))
        refusal = self.guard.change_refusal(request, who, (form.get(CSRF_FIELD) or [""])[0])
        if refusal is not None:
            return JSONResponse({"error": refusal}, status_code=403)
        asked = what_if_page.Asked(
            policy=(form.get("policy") or [""])[0],
            runs=what_if_page.runs_of((form.get("runs") or [""])[0]),
            since=(form.get("since") or ["7d"])[0],
        )
        done = await what_if_page.answer(self.client, asked)
        values = {"asked": asked, "report": done.report, "error": done.error}
        page = self.render("what_if.html", request, who, **values)
        return HTMLResponse(page, status_code=done.code)

    # ------------------------------------------------------------ API

    async def api_what_if(self, request: Request, who: Identity) -> Response:
        """`POST /api/what-if {"policy", "runs"?, "since"?}`: the calls and the summary."""
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        asked = what_if_page.asked_by_json(body)
        if isinstance(asked, str):
            return JSONResponse({"error": asked}, status_code=400)
        code, answer = what_if_page.answered_json(await what_if_page.answer(self.client, asked))
        return JSONResponse(answer, status_code=code)

    async def api_runs(self, request: Request, who: Identity) -> Response:
        code, listed = await self._list_runs(request)
        if code != 200:
            return JSONResponse({"error": listed["error"]}, status_code=code)
        rows: list[RunRow] = listed["rows"]
        return JSONResponse({"runs": [r.as_json() for r in rows], "next_page": listed["next_page"]})

    async def api_audit(self, request: Request, who: Identity) -> Response:
        """The run's `audit` query's answer, as it is."""
        workflow_id = workflow_id_of(request)
        handle = AgentHandle(self.client, workflow_id, worker_wait=actions.WORKER_WAIT_SECONDS)
        try:
            record = await handle.record()  # a closed run: from its history, no worker needed
            view = record.audit if record is not None else await handle.audit()
        except Exception as err:
            code, failure = actions.query_failure(err, workflow_id)
            return JSONResponse(failure, status_code=code)
        return JSONResponse(view.model_dump(mode="json"))

    async def api_pending(self, request: Request, who: Identity) -> Response:
        runs = await self.inbox.fresh()
        return JSONResponse([r.as_json() for r in runs])

    async def api_run(self, request: Request, who: Identity) -> Response:
        workflow_id = workflow_id_of(request)
        handle = AgentHandle(self.client, workflow_id, worker_wait=actions.WORKER_WAIT_SECONDS)
        try:
            record = await handle.record()  # a closed run: from its history, no worker needed
            if record is not None:
                status, messages, events = record.status, record.messages, record.events
            else:
                status = await handle.status()
                messages = await handle.messages()
                events = await handle.events(-1)
        except Exception as err:
            code, failure = actions._failure(err, workflow_id)
            return JSONResponse(failure, status_code=code)
        closed = None if record is None else {"status": record.closed, "reason": record.failure}
        return JSONResponse(
            {
                "workflow_id": workflow_id,
                "status": status.model_dump(mode="json"),
                "messages": [m.model_dump(mode="json") for m in messages],
                "events": [e.model_dump(mode="json") for e in events],
                "closed": closed,
            }
        )

    async def api_events(self, request: Request, who: Identity) -> Response:
        """Server-sent events: each event's JSON as `data`, its seq as `id`; resumes after
        `Last-Event-ID`; ends after `finished`. Served from the run's shared watch."""
        watch = self.watches.get(workflow_id_of(request))
        after = _int(request.headers.get("last-event-id"), -1)

        async def stream() -> AsyncIterator[str]:
            last = after
            while True:
                watch.viewed()
                seen = watch.changes.version
                for event in [e for e in watch.state.events if e.seq > last]:
                    last = event.seq
                    data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False)
                    yield f"id: {last}\ndata: {data}\n\n"
                    if event.type == "finished":
                        return
                if watch.done:
                    if watch.state.closed:  # ended without `finished` (e.g. terminated)
                        closed = json.dumps({"closed": watch.state.closed})
                        yield f"event: closed\ndata: {closed}\n\n"
                    return
                before = watch.changes.version
                await watch.changes.wait(seen, SSE_PING_SECONDS)
                if watch.changes.version == before:
                    yield ": ping\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    async def api_start(self, request: Request, who: Identity) -> Response:
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        code, answer = await actions.start_run(self.client, self.queue, body)
        headers = {}
        if code == 201:
            headers["Location"] = f"/runs/{segment(answer['workflow_id'])}"
            self.inbox.poke()
        return JSONResponse(answer, status_code=code, headers=headers)

    async def api_fork(self, request: Request, who: Identity) -> Response:
        """A new run from this run's record up to the end of a round (`starter.web.forks`)."""
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        code, answer = await forks.fork(self.client, self.queue, workflow_id_of(request), body)
        headers = {"Location": f"/runs/{segment(answer['workflow_id'])}"} if code == 201 else {}
        return JSONResponse(answer, status_code=code, headers=headers)

    async def api_approve(self, request: Request, who: Identity) -> Response:
        return await self._signed_action(request, who, actions.answer)

    async def api_answer(self, request: Request, who: Identity) -> Response:
        return await self._signed_action(request, who, actions.submit_answer)

    async def api_grant(self, request: Request, who: Identity) -> Response:
        return await self._signed_action(request, who, grants.grant)

    async def api_reopen(self, request: Request, who: Identity) -> Response:
        return await self._signed_action(request, who, actions.reopen)

    async def _signed_action(self, request: Request, who: Identity, act: SignedAction) -> Response:
        """One person's answer, grant or reopen from a JSON body: sent as the signed-in user,
        signed through the app's signing service when the approvers file lets that user sign
        through it (never for the local, unauthenticated user); the user's groups are the
        worker's approvers file's, never sent."""
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        key = self.signing_key if who.via != "local" else None
        code, answer = await act(self.client, workflow_id_of(request), body, who.user, key=key)
        if code == 409 and isinstance(answer.get("error"), str):  # say what was missing, if so
            answer["error"] = self.viewer(who).plainly(answer["error"])
        self.inbox.poke()
        return JSONResponse(answer, status_code=code)

    async def api_cancel(self, request: Request, who: Identity) -> Response:
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        code, answer = await actions.cancel(self.client, workflow_id_of(request), body, who.user)
        self.inbox.poke()
        return JSONResponse(answer, status_code=code)

    async def api_message(self, request: Request, who: Identity) -> Response:
        body, bad = await self.json_body(request)
        if bad is not None:
            return bad
        workflow_id = workflow_id_of(request)
        code, answer = await actions.send_message(self.client, workflow_id, body)
        return JSONResponse(answer, status_code=code)

    # ------------------------------------------------------------ assembly

    def routes(self) -> list[Route | Mount]:
        page, api = self.page, self.api
        return [
            Route("/", page(self.inbox_page)),
            Route("/signin", self.signin_page, methods=["GET"]),
            Route("/signin", self.signin, methods=["POST"]),
            Route("/signout", self.signout, methods=["POST"]),
            Route("/inbox/live", api(self.inbox_live, changes=False)),
            Route("/runs", page(self.runs_page)),
            Route("/runs/{workflow_id}", page(self.run_page)),
            Route("/runs/{workflow_id}/live", api(self.run_live, changes=False)),
            Route("/what-if", page(self.what_if_page), methods=["GET", "POST"]),
            Route("/api/what-if", api(self.api_what_if, changes=True), methods=["POST"]),
            Route("/api/pending", api(self.api_pending, changes=False)),
            Route("/api/runs", api(self.api_runs, changes=False), methods=["GET"]),
            Route("/api/runs", api(self.api_start, changes=True), methods=["POST"]),
            Route("/api/runs/{workflow_id}", api(self.api_run, changes=False)),
            Route("/api/runs/{workflow_id}/audit", api(self.api_audit, changes=False)),
            Route("/api/runs/{workflow_id}/events", api(self.api_events, changes=False)),
            Route(
                "/api/runs/{workflow_id}/approvals",
                api(self.api_approve, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/answers",
                api(self.api_answer, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/budget",
                api(self.api_grant, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/reopen",
                api(self.api_reopen, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/cancel",
                api(self.api_cancel, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/messages",
                api(self.api_message, changes=True),
                methods=["POST"],
            ),
            Route(
                "/api/runs/{workflow_id}/fork", api(self.api_fork, changes=True), methods=["POST"]
            ),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]

    def asgi(self) -> SecurityHeaders:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self.inbox.start()
            try:
                yield
            finally:
                await self.inbox.stop()
                await self.watches.stop()
                await self.run_counts.stop()

        app: ASGIApp = SegmentedPath(Starlette(routes=self.routes(), lifespan=lifespan))
        app = LimitedBody(app, MAX_BODY_BYTES)
        if self.guard.local:
            app = LoopbackHostOnly(app, LOCAL_MODE_HOST)
        return SecurityHeaders(AsciiHeaders(app))


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _next(request: Request, form: dict[str, list[str]] | None = None) -> str:
    """Where to go after signing in: a path on this site only."""
    target = (form or {}).get("next", [None])[0] or request.query_params.get("next") or "/"
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def build_app(
    client: Client,
    *,
    queue: str,
    guard: Guard,
    signing_key: SigningKey | None = None,
    approvers: ApproversFile | None = None,
) -> tuple[WebApp, SecurityHeaders]:
    web = WebApp(client, queue=queue, guard=guard, signing_key=signing_key, approvers=approvers)
    return web, web.asgi()


__all__ = ["Guard", "Signer", "ToolCall", "UsersFile", "WebApp", "build_app"]
