"""`python -m starter web [--host 127.0.0.1] [--port 8080]` and `python -m starter web add-user
NAME [--token]`: serve the approval inbox until SIGINT/SIGTERM, or add a user who may sign in."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import signal
import sys
from pathlib import Path

import uvicorn
from temporalio.client import Client

from runtime.approvers import ApproversFile, load_approvers
from runtime.connect import connect, connect_config, task_queue
from runtime.setting_error import SettingError
from runtime.settings import Settings
from runtime.shown_commands import starter_command
from runtime.signing_key import SigningKey
from starter.codec_server import listen
from starter.errors import cannot_reach
from starter.follow import default_approver
from starter.request_guards import is_loopback
from starter.web.app import build_app
from starter.web.auth import (
    ENV_USERS_FILE,
    EndedSessions,
    Signer,
    UsersFile,
    UsersFileError,
    add_user,
    checked_groups,
)
from starter.web.security import Guard

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class StartError(Exception):
    """The server cannot start as configured; the message is the one line to print."""


def make_guard(host: str, settings: Settings) -> Guard:
    """Signed-in mode with a users file; local mode (loopback only) without one."""
    path = settings.web_users_file
    signer = Signer.of(settings.web_secret)
    if not path:
        if not is_loopback(host):
            raise StartError(
                f"--host {host} is not a loopback address: set {ENV_USERS_FILE} (see"
                f" `{starter_command()} web add-user`) so that people sign in, or serve on"
                " 127.0.0.1"
            )
        return Guard(signer, None, default_approver())
    try:
        users = UsersFile(Path(path))
    except UsersFileError as err:
        raise StartError(f"{ENV_USERS_FILE}: {err}") from None
    ended = EndedSessions(ended_sessions_file(Path(path)))
    return Guard(signer, users, default_approver(), ended)


def web_signing(settings: Settings, local: bool) -> tuple[SigningKey | None, str]:
    """The web app's signing service (AGENT_WEB_SIGNING_KEY) and the line `starter web` says at
    start: whether it signs, and for whom. A key that cannot be used: StartError."""
    path = settings.web_signing_key
    unsigned = "answers from here go unsigned (taken only where no approver rule applies)"
    if path is None:
        return None, f"signs nothing: AGENT_WEB_SIGNING_KEY is not set, so {unsigned}"
    if settings.approvers_file is None:
        raise StartError(
            f"AGENT_WEB_SIGNING_KEY {path}: AGENT_APPROVERS_FILE is not set, and the web app reads"
            " it to know for whom its signing service may sign"
        )
    try:
        approvers = load_approvers(settings.approvers_file)
        key = SigningKey.load(path, approvers, what="AGENT_WEB_SIGNING_KEY")
    except SettingError as err:
        raise StartError(str(err)) from None
    if key.service is None:
        raise StartError(
            f"AGENT_WEB_SIGNING_KEY {path} is {key.person}'s own key: the web app signs with a"
            f" signing service's key (a `SERVICE @service KEY` line of {approvers.path})"
        )
    if local:
        return None, f"signs nothing in local mode (no sign-in), so {unsigned}"
    people = approvers.signs_through(key.service)
    if not people:
        return key, (
            f"signs through {key.service} for no one (no `NAME GROUPS via:{key.service}` line in"
            f" {approvers.path}), so {unsigned}"
        )
    return key, f"signs through {key.service} for {', '.join(people)}; others' answers go unsigned"


def people_of(settings: Settings) -> ApproversFile | None:
    """AGENT_APPROVERS_FILE, read for the signed-in people's groups (the header, who may answer
    a card); None when it is not set. A file that cannot be read: StartError."""
    if settings.approvers_file is None:
        return None
    try:
        return load_approvers(settings.approvers_file)
    except SettingError as err:
        raise StartError(str(err)) from None


def ended_sessions_file(users_file: Path) -> Path:
    """Where the sessions signed out before they expired are kept: beside the users file."""
    return users_file.with_name(users_file.name + ".ended-sessions")


async def serve(host: str, port: int, client: Client | None = None) -> int:
    """Serve until SIGINT or SIGTERM; returns the exit code."""
    try:
        settings = Settings.read()
        guard = make_guard(host, settings)
        signing_key, signing_line = web_signing(settings, guard.local)
        approvers = people_of(settings)
    except StartError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if client is None:
        config = connect_config()
        try:
            client = await connect()
        except Exception as err:
            address, namespace = str(config.get("target_host")), str(config.get("namespace"))
            print(f"error: {cannot_reach(address, namespace, err).message}", file=sys.stderr)
            return EXIT_ERROR
    _web, app = build_app(
        client, queue=task_queue(), guard=guard, signing_key=signing_key, approvers=approvers
    )
    try:
        sock = listen(host, port)
    except OSError as err:
        print(f"error: cannot listen on {host}:{port}: {err.strerror or err}", file=sys.stderr)
        return EXIT_ERROR
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    )
    # Our own handlers: uvicorn's would raise the signal again after shutdown.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    shown_host = f"[{host}]" if ":" in host else host
    mode = "local mode, no sign-in" if guard.local else f"sign-in with {ENV_USERS_FILE}"
    print(f"approval inbox at http://{shown_host}:{sock.getsockname()[1]}/ ({mode})", flush=True)
    print(f"web: {signing_line}", flush=True)
    await server.serve(sockets=[sock])
    return EXIT_OK


def read_password() -> str | None:
    """Twice at a terminal (they must match); else one line of standard input."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            print("error: the passwords differ", file=sys.stderr)
            return None
        return first
    line = sys.stdin.readline()
    return line.rstrip("\r\n")


def cmd_add_user(name: str, with_token: bool, groups: list[str] | None = None) -> int:
    path = Settings.read().web_users_file
    if not path:
        print(f"error: set {ENV_USERS_FILE} to the users file to write", file=sys.stderr)
        return EXIT_USAGE
    try:
        checked_groups(groups or [])  # a bad group name is refused before the password is asked
    except UsersFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    password = read_password()
    if password is None:
        return EXIT_USAGE
    if not password:
        print("error: an empty password is not allowed", file=sys.stderr)
        return EXIT_USAGE
    try:
        token = add_user(Path(path), name, password, with_token=with_token, groups=groups)
    except (UsersFileError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    written = f"user {name} written to {path}"
    if groups:
        written += f" (groups: {', '.join(checked_groups(groups))})"
    print(written, file=sys.stderr if token else sys.stdout)
    if token:
        print(token, flush=True)
    return EXIT_OK
