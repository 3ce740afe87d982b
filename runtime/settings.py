"""Every setting of the project's programs, typed, in one class every program reads: `Settings`
reads the environment once and refuses a value it cannot use with one line naming the variable
and what it accepts (`BadSetting`). The worker, every `python -m starter` command, the web inbox
and the codec server read it at start, so a typo (`LLM_STREAM=flase`) stops every program the
same way, and each names the `AGENT_*`/`LLM_*` variables that are no setting
(`warn_unknown_settings`: a misspelt setting is otherwise ignored in silence).

`Settings.read()` only checks (a starter may check the worker's settings on a machine without the
worker's files); `Settings.from_env()` is the worker's: the same, then `for_worker()` resolves its
folders (the workspace is created), reads the system prompt's file and checks the payload store.

The fields' docs are the settings' documentation: `python -m runtime.settings_table` prints the
table of the README and of docs/worker.md from them.

Values are strings in the environment; one rule each decides what a string means: a switch is
`true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off` (any case) and nothing else; a mode is one of its
listed words; a number is positive; a URL has its scheme. An empty or blank value means "unset".
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, TextIO

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from runtime.modes import (
    NOTIFY_FORMATS,
    SANDBOX_MODES,
    TEXT_CALL_MODES,
    NotifyFormat,
    SandboxMode,
    TextCallMode,
)
from runtime.payload_store import (
    DEFAULT_MAX_CONVERSATION_MB,
    ENV_MAX_CONVERSATION_MB,
    ENV_S3_ENDPOINT,
    ENV_STORE,
    conversation_budget_bytes,
)
from runtime.setting_error import SettingError
from runtime.url_redaction import redact_url
from workflows.bounds import MAX_CONVERSATION_BYTES

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_WORKSPACE = "agent-workspace"
STATE_DIR_NAME = ".agent-state"
"""The state folder's name beside the workspace, when `AGENT_STATE_DIR` is not set."""
MAX_SYSTEM_PROMPT_BYTES = 100_000
"""The longest `AGENT_SYSTEM_PROMPT` (or its file) the worker takes: it goes with every request."""
MAX_WORKER_PROCESSES = 64

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ESCALATION_GROUPS = 20
_TOOL_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


class BadSetting(SettingError):
    """A setting no program may start with; the message is one line naming the variable."""


def _shown(raw: object) -> str:
    return repr(str(raw)[:40])


def _switch(raw: object) -> bool:
    """The one rule of every on/off setting: a typo must not flip it."""
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"must be true or false (or 1/0, yes/no, on/off), got {_shown(raw)}")


def _choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    def check(raw: object) -> str:
        word = str(raw).strip().lower()
        if word not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {_shown(raw)}")
        return word

    return check


def _positive(what: str) -> Callable[[object], float]:
    def check(raw: object) -> float:
        try:
            value = float(str(raw).strip())
        except ValueError:
            value = 0.0
        if not 0 < value < float("inf"):
            raise ValueError(f"must be a positive number of {what}, got {_shown(raw)}")
        return value

    return check


def _whole(raw: object) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"must be a positive whole number, got {_shown(raw)}")
    return value


_GROUP = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _listed(raw: object) -> str:
    """A list's text: as the environment gives it, or the items given to the constructor."""
    if isinstance(raw, (list, tuple)):
        return ",".join(str(item) for item in raw)
    return str(raw)


def _groups(raw: object) -> tuple[str, ...]:
    """Group names, comma- or space-separated (as the web users file names them)."""
    groups = [n for n in re.split(r"[\s,]+", _listed(raw).strip()) if n]
    for group in groups:
        if not _GROUP.fullmatch(group):
            raise ValueError(
                f"lists {group[:40]!r}, which is not a group name (letters, digits, _ . -)"
            )
    return tuple(dict.fromkeys(groups))


def _names(raw: object) -> tuple[str, ...]:
    names = [n for n in re.split(r"[\s,]+", _listed(raw).strip()) if n]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"lists {name[:40]!r}, which is not a variable name")
    return tuple(dict.fromkeys(names))


def _escalation_groups(raw: object) -> tuple[str, ...]:
    groups = [g for g in re.split(r"[\s,]+", _listed(raw).strip()) if g]
    for group in groups:
        if not _GROUP.fullmatch(group):
            raise ValueError(
                f"lists {group[:40]!r}, which is not a group name (letters, digits, . _ -;"
                " at most 100)"
            )
    kept = tuple(dict.fromkeys(groups))
    if len(kept) > MAX_ESCALATION_GROUPS:
        raise ValueError(f"lists {len(kept)} groups, more than {MAX_ESCALATION_GROUPS}")
    return kept


def _tool_specs(raw: object) -> tuple[str, ...]:
    specs = [s.strip() for s in _listed(raw).split(",") if s.strip()]
    for spec in specs:
        if not _TOOL_SPEC.fullmatch(spec):
            raise ValueError(f"lists {spec[:80]!r}, which is not package.module:attribute")
    return tuple(dict.fromkeys(specs))


def http_url(raw: str) -> bool:
    """Whether `raw` is an http:// or https:// URL with a host (and a port that is a number)."""
    try:
        parts = urllib.parse.urlsplit(raw)
        _ = parts.port  # a port that is not a number raises here
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed `[` of an IPv6 host, a port that is not a number
        return False


def shown_notify_url(url: str, *, rest: bool = True) -> str:
    """`AGENT_NOTIFY_URL` as it may be shown: scheme, host and port only, then `/…` when it has
    more (`rest`). Its path is as secret as its user info and query (a Slack webhook's path is its
    token), so it is never printed."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "<unreadable URL>"
    if not parts.scheme or not host:
        return "<not a URL>"
    shown_host = f"[{host}]" if ":" in host else host
    where = f"{shown_host}:{port}" if port is not None else shown_host
    more = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{parts.scheme}://{where}{'/…' if rest and more else ''}"


def _base_url(raw: object) -> str:
    """The endpoint without a trailing `/` (the client adds `/chat/completions`); a query stays."""
    text = str(raw).strip()
    if not http_url(text):
        raise ValueError(f"must be an http:// or https:// URL, got {redact_url(text)!r}")
    parts = urllib.parse.urlsplit(text)
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def _notify_url(raw: object) -> str:
    text = str(raw).strip()
    if not http_url(text):
        raise ValueError(f"must be an http:// or https:// URL, got {shown_notify_url(text)!r}")
    return text


def _inbox_url(raw: object) -> str:
    """It goes out with every notification, so it may carry no credentials."""
    text = str(raw).strip()
    if not http_url(text):
        raise ValueError(f"must be an http:// or https:// URL, got {redact_url(text)[:200]!r}")
    parts = urllib.parse.urlsplit(text)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            "must be the web inbox's address (http(s)://HOST[:PORT][/PATH]), without user info,"
            f" query or fragment: got {redact_url(text)[:200]!r}"
        )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _endpoint_url(raw: object) -> str:
    text = str(raw).strip()
    if not http_url(text):
        raise ValueError(f"must be an http:// or https:// URL, got {redact_url(text)[:200]!r}")
    return text


RETIRED_APPROVER_KEY = (
    "AGENT_APPROVER_KEY is retired: each person signs with their own key; list people and their"
    " keys in AGENT_APPROVERS_FILE (docs/approvers.md)"
)


def _retired_approver_key(raw: object) -> None:
    """The shared key of before: set, it stops every program, pointing to its replacement."""
    raise ValueError(RETIRED_APPROVER_KEY)


def api_key_problem(key: str) -> str | None:
    """Why `key` cannot be sent as `Authorization: Bearer <key>`, or None. An HTTP header carries
    printable ASCII; a key with a line break (a file read with its newline, a pasted
    continuation) would otherwise fail inside the HTTP library, in errors that quote it. The
    answer names the kind of character and its position, never the key."""
    for position, char in enumerate(key, start=1):
        if "!" <= char <= "~":
            continue
        if char in "\r\n":
            kind = "a line break"
        elif char.isspace():
            kind = "white space"
        elif ord(char) < 32 or ord(char) == 127:
            kind = "a control character"
        else:
            kind = "a non-ASCII character"
        return (
            f"LLM_API_KEY has {kind} at position {position} of {len(key)}; an API key is one"
            " line of printable ASCII (check how it was set)"
        )
    return None


def _api_key(raw: object) -> str:
    key = str(raw).strip()
    problem = api_key_problem(key)
    if problem:
        raise ValueError(problem)
    return key


def _system_prompt(raw: object) -> str:
    text = str(raw)
    if not text.startswith("@") and len(text.strip().encode("utf-8")) > MAX_SYSTEM_PROMPT_BYTES:
        raise ValueError(
            f"has more than the {MAX_SYSTEM_PROMPT_BYTES:,} bytes a system prompt may have"
        )
    return text


def _host_port(raw: object) -> str:
    """`HOST:PORT`, the port a number from 1 to 65535 (the host is resolved when it is served)."""
    text = str(raw).strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be HOST:PORT (e.g. 127.0.0.1:9464), got {text[:80]!r}")
    return text


def _processes(raw: object) -> int:
    text = str(raw).strip()
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= MAX_WORKER_PROCESSES:
        raise ValueError(
            f"must be a whole number from 1 to {MAX_WORKER_PROCESSES}, got {_shown(raw)}"
        )
    return value


def _megabytes(raw: object) -> float:
    value = _positive("megabytes")(raw)
    if value > 1024:
        raise ValueError(f"must be a number of megabytes above 0, at most 1024, got {_shown(raw)}")
    return value


def _folder(raw: object) -> Path:
    """A path as given, `~` expanded (resolved only by the worker: `Settings.for_worker`)."""
    return Path(raw.strip() if isinstance(raw, str) else str(raw)).expanduser()


def _characters(raw: object) -> int:
    return max(1, int(_positive("characters")(raw)))


def _optional(check: Callable[[object], Any]) -> Callable[[object], Any]:
    """`check`, letting None (unset, as the constructor may be told) through."""

    def checked(raw: object) -> Any:
        return None if raw is None else check(raw)

    return checked


Switch = Annotated[bool, BeforeValidator(_switch)]
Seconds = Annotated[float, BeforeValidator(_positive("seconds"))]
Count = Annotated[int, BeforeValidator(_whole)]
SecondsOrNone = Annotated[float | None, BeforeValidator(_optional(_positive("seconds")))]


def setting(
    name: str,
    default: Any,
    doc: str,
    *,
    shown: str,
    used_by: str = "worker",
    readme: bool = False,
    secret: bool = False,
) -> Any:
    """One setting: its variable, its default, and its row of the documentation's table (`shown`:
    the default as people read it; `readme`: also in the README's short table)."""
    extra: dict[str, Any] = {"shown": shown, "used_by": used_by, "readme": readme}
    return Field(
        default=default,
        validation_alias=name,
        description=doc,
        repr=not secret,
        json_schema_extra=extra,
    )


_READING: ContextVar[Mapping[str, str] | None] = ContextVar("settings_environ", default=None)
"""The environment `Settings.read` reads (None: the process's)."""


class _Variables(PydanticBaseSettingsSource):
    """The settings' variables of one environment (a mapping; default the process's): each one
    set to something other than blank, stripped. Values are never parsed as JSON."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = str(field.validation_alias or field_name)
        raw = self._environ.get(name)
        return (raw.strip() if raw and raw.strip() else None), name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, name, _ = self.get_field_value(field, field_name)
            if value is not None:
                found[name] = value
        return found


def one_line(err: ValidationError) -> str:
    """The first refused value as one line that starts with its variable's name."""
    errors = err.errors(include_url=False)
    first = errors[0]
    name = str(first["loc"][0]) if first["loc"] else "a setting"
    cause = first.get("ctx", {}).get("error")
    message = str(cause) if cause is not None else str(first["msg"])
    line = message if message.startswith(name) else f"{name} {message}"
    more = len({e["loc"][0] for e in errors if e["loc"]} - {name})
    return f"{line} (and {more} more setting(s) refused)" if more else line


class Settings(BaseSettings):
    """Every setting, each checked by its own rule: what every program reads.

    `Settings.read()` (or `Settings()`) takes the environment as it is: paths are not resolved
    and files not read, so the starter and the web inbox may check the settings on a machine
    without the worker's files. The worker's come from `Settings.from_env()`, which also does
    what only the worker may (`for_worker`). The constructor takes values by field name, over the
    process's environment (an embedding application's or a test's own settings)."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        extra="forbid",
        frozen=True,
        validate_default=False,
        populate_by_name=True,  # the constructor takes field names (pydantic >= 2.7, as required)
    )
    _for_worker: bool = PrivateAttr(default=False)

    llm_base_url: Annotated[str | None, BeforeValidator(_optional(_base_url))] = setting(
        "LLM_BASE_URL",
        None,
        "an OpenAI-compatible endpoint, e.g. `https://api.openai.com/v1` (http or https)",
        shown="*(unset → `scripted`)*",
        readme=True,
        secret=True,
    )
    llm_api_key: Annotated[str | None, BeforeValidator(_optional(_api_key))] = setting(
        "LLM_API_KEY",
        None,
        "sent only as `Authorization: Bearer …`; never printed",
        shown="*(none)*",
        readme=True,
        secret=True,
    )
    llm_model: str = setting(
        "LLM_MODEL",
        DEFAULT_MODEL,
        "model name; a run's `options.model` overrides it",
        shown="`gpt-4o-mini`",
        readme=True,
    )
    llm_stream: Switch = setting(
        "LLM_STREAM", True, "`false` sends non-streaming requests", shown="`true`"
    )
    llm_timeout_seconds: Seconds = setting(
        "LLM_TIMEOUT_SECONDS",
        120.0,
        "longest silence tolerated from the provider (per read); a timeout is retried at most"
        " twice",
        shown="`120`",
    )
    llm_max_wait: Seconds = setting(
        "LLM_MAX_WAIT",
        600.0,
        "seconds a model call keeps trying a server that cannot be reached (refused, connect"
        " timeout, DNS, TLS); every failed attempt is a `warning` event and one log line, then"
        " the run ends `error` (a `keep_alive` session's turn ends, and it waits for the next"
        " message)",
        shown="`600`",
    )
    llm_max_tokens: Annotated[int | None, BeforeValidator(_optional(_whole))] = setting(
        "LLM_MAX_TOKENS",
        None,
        "most tokens per reply, sent as `max_tokens`; a run's `options.max_tokens` wins",
        shown="*(none)*",
    )
    llm_text_tool_calls: Annotated[TextCallMode, BeforeValidator(_choice(TEXT_CALL_MODES))] = (
        setting(
            "LLM_TEXT_TOOL_CALLS",
            "parse",
            "a reply whose whole text is a tool call: `parse` runs it as the call(s) when it is in"
            " a call's syntax (`<tool_call>…</tool_call>`, one fenced `json` block), `bare` also"
            " when it is only a bare JSON object, `warn` leaves it as text with a warning, `off`"
            " does neither",
            shown="`parse`",
        )
    )
    llm_parallel_tool_calls: Switch = setting(
        "LLM_PARALLEL_TOOL_CALLS",
        True,
        "sent as `parallel_tool_calls` with the tools (llama.cpp's default is false)",
        shown="`true`",
    )
    llm_context_tokens: Annotated[int | None, BeforeValidator(_optional(_whole))] = setting(
        "LLM_CONTEXT_TOKENS",
        None,
        "the model's context window in tokens",
        shown="*(the server's `/props`, else 128000)*",
    )
    llm_summary_model: str | None = setting(
        "LLM_SUMMARY_MODEL",
        None,
        "the model that writes compaction summaries",
        shown="*(the run's model)*",
    )
    system_prompt: Annotated[str | None, BeforeValidator(_optional(_system_prompt))] = setting(
        "AGENT_SYSTEM_PROMPT",
        None,
        "text, or `@FILE`: the first message of a run that has no system message (at most"
        " 100,000 bytes)",
        shown="*(none)*",
        secret=True,
    )
    workspace: Annotated[Path, BeforeValidator(_folder)] = setting(
        "AGENT_WORKSPACE",
        Path(DEFAULT_WORKSPACE),
        "the only folder the tools may touch (created if missing)",
        shown="`./agent-workspace`",
        readme=True,
    )
    state_dir: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_STATE_DIR",
        None,
        "at-most-once records of tools that are not safe to retry (sealed with the encryption"
        " key when one is set); outside the workspace, never visible to a command",
        shown="`<workspace>/../.agent-state`",
    )
    state_retention_days: Annotated[float, BeforeValidator(_positive("days"))] = setting(
        "AGENT_STATE_RETENTION_DAYS",
        30.0,
        "at-most-once records older than this are removed (at start, then at most hourly)",
        shown="`30`",
    )
    command_timeout_seconds: Seconds = setting(
        "AGENT_COMMAND_TIMEOUT_SECONDS", 30.0, "time limit of `run_command`", shown="`30`"
    )
    sandbox: Annotated[SandboxMode, BeforeValidator(_choice(SANDBOX_MODES))] = setting(
        "AGENT_SANDBOX",
        "auto",
        "`auto`: bubblewrap if it works, else a warning and no `run_command` (and no MCP stdio"
        " servers); `required`: refuse to start without it; `off`: run commands and stdio"
        " servers unsandboxed",
        shown="`auto`",
        readme=True,
    )
    command_env: Annotated[tuple[str, ...], BeforeValidator(_names)] = setting(
        "AGENT_COMMAND_ENV",
        (),
        "names (comma- or space-separated) of variables commands get, besides `PATH`, `HOME`"
        " (the workspace) and `LANG`",
        shown="*(none)*",
    )
    command_network: Switch = setting(
        "AGENT_COMMAND_NETWORK",
        False,
        "`true`: commands get their own network with an uplink (slirp4netns), never the host's"
        " loopback; refused without slirp4netns",
        shown="`false`",
    )
    command_max_processes: Count = setting(
        "AGENT_COMMAND_MAX_PROCESSES",
        256,
        "processes and threads one command may have (its cgroup's `pids.max`, else RLIMIT_NPROC"
        " above the user's count)",
        shown="`256`",
    )
    command_max_memory_mb: Count = setting(
        "AGENT_COMMAND_MAX_MEMORY_MB",
        1024,
        "memory one command may use in all, in MiB (its cgroup's limit, else per process)",
        shown="`1024`",
    )
    stream_deltas: Switch = setting(
        "AGENT_STREAM_DELTAS",
        True,
        "publish the model's text live on the run's stream (`false`: the workflow's own events"
        " only)",
        shown="`true`",
    )
    stream_flush_seconds: Seconds = setting(
        "AGENT_STREAM_FLUSH_SECONDS",
        1.0,
        "how often streamed text is sent (one signal and about four history events each)",
        shown="`1.0`",
    )
    stream_flush_chars: Annotated[int, BeforeValidator(_characters)] = setting(
        "AGENT_STREAM_FLUSH_CHARS",
        2_000,
        "send earlier when this much text is waiting",
        shown="`2000`",
    )
    policy_file: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_POLICY_FILE",
        None,
        'the worker\'s approval rules, `{"enforced": [rules], "defaults": [rules]}`, read once'
        " at start",
        shown="*(none)*",
        readme=True,
    )
    max_run_tokens: Annotated[int | None, BeforeValidator(_optional(_whole))] = setting(
        "AGENT_MAX_RUN_TOKENS",
        None,
        "the most tokens (prompt and completion, as the provider counts them) a run may spend"
        " before it waits for a person to grant more; a run's `options.max_run_tokens` may be"
        " lower, never higher",
        shown="*(none: no budget)*",
    )
    budget_groups: Annotated[tuple[str, ...], BeforeValidator(_groups)] = setting(
        "AGENT_BUDGET_GROUPS",
        (),
        "groups (comma-separated) whose people alone may grant tokens to a run at its budget,"
        " or stop it",
        shown="*(none: anyone who may answer)*",
    )
    tools: Annotated[tuple[str, ...], BeforeValidator(_tool_specs)] = setting(
        "AGENT_TOOLS",
        (),
        "your own tools: `package.module:attribute,…`, each a `Tool`, an iterable of them or a"
        " callable returning them ([docs/embedding.md](docs/embedding.md))",
        shown="*(none)*",
        readme=True,
    )
    builtin_tools: Switch = setting(
        "AGENT_BUILTIN_TOOLS",
        True,
        "`false` leaves the four built-in file tools out",
        shown="`true`",
    )
    mcp_config: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_MCP_CONFIG",
        None,
        "a JSON file of MCP servers (`mcpServers`) whose tools the agent gets, as `NAME__TOOL`",
        shown="*(none)*",
        readme=True,
    )
    notify_url: Annotated[str | None, BeforeValidator(_optional(_notify_url))] = setting(
        "AGENT_NOTIFY_URL",
        None,
        "http(s) address that gets a POST when a call waits for a person, at half its approval"
        " timeout, and when such a run ends"
        " ([notifications](docs/notifications.md))",
        shown="*(none: nobody is told)*",
        readme=True,
        secret=True,
    )
    notify_format: Annotated[NotifyFormat, BeforeValidator(_choice(NOTIFY_FORMATS))] = setting(
        "AGENT_NOTIFY_FORMAT",
        "json",
        "`json`: the agent's body; `slack`: a Slack incoming webhook's `{\"text\": …}`",
        shown="`json`",
    )
    notify_arguments: Annotated[bool | None, BeforeValidator(_optional(_switch))] = setting(
        "AGENT_NOTIFY_ARGUMENTS",
        None,
        "whether notifications carry the call's arguments (and a failed run's error)",
        shown="`true`, `false` with encryption",
    )
    inbox_url: Annotated[str | None, BeforeValidator(_optional(_inbox_url))] = setting(
        "AGENT_INBOX_URL",
        None,
        "the web inbox's address (no user info, query or fragment); notifications link to"
        " `AGENT_INBOX_URL/runs/ID`",
        shown="*(none: `url` is null)*",
    )
    ask_user: Switch = setting(
        "AGENT_ASK_USER",
        False,
        "offer the model the `ask_user` tool (a question that waits for a person's answer) in"
        " runs that do not set `options.ask_user`"
        " ([questions](docs/questions.md))",
        shown="`false`",
    )
    sub_agents: Switch = setting(
        "AGENT_SUB_AGENTS",
        False,
        "offer the model the `delegate` tool (a task handed to a sub-agent, a child run under"
        " the same people, rules and budget) in runs that do not set `options.sub_agents`"
        " ([sub-agents](docs/sub-agents.md))",
        shown="`false`",
    )
    max_depth: Annotated[int, BeforeValidator(_whole)] = setting(
        "AGENT_MAX_DEPTH",
        2,
        "a sub-agent may delegate again only while its depth is below this (a run's own"
        " sub-agents are depth 1)",
        shown="`2`",
    )
    escalate_after_seconds: SecondsOrNone = setting(
        "AGENT_ESCALATE_AFTER_SECONDS",
        None,
        "a call waiting this long for a person is escalated to `AGENT_ESCALATE_TO` (a run's"
        " `approval_escalate_after_seconds` wins)"
        " ([expiry and escalation](docs/expiry.md))",
        shown="*(none: never)*",
    )
    escalate_to: Annotated[tuple[str, ...], BeforeValidator(_escalation_groups)] = setting(
        "AGENT_ESCALATE_TO",
        (),
        "`GROUP,…`: the groups an escalated call goes to, who may then answer it too (a run's"
        " `approval_escalate_to` wins)",
        shown="*(none)*",
    )
    task_queue: str | None = setting(
        "AGENT_TASK_QUEUE",
        None,
        "the task queue",
        shown="`agent`",
        used_by="worker, starter",
        readme=True,
    )
    worker_processes: Annotated[int | None, BeforeValidator(_optional(_processes))] = setting(
        "AGENT_WORKER_PROCESSES",
        None,
        "run this many copies of the worker, each a process of its own (1 to 64; `--processes N`"
        " wins) ([several worker processes](docs/worker.md#several-worker-processes))",
        shown="`1`",
    )
    metrics_address: Annotated[str | None, BeforeValidator(_optional(_host_port))] = setting(
        "AGENT_METRICS_ADDRESS",
        None,
        "`HOST:PORT`: serve Prometheus metrics at `http://HOST:PORT/metrics`: the SDK's"
        " (`temporal_…`) and the agent's (`agent_…`); one that cannot be bound stops the worker"
        " ([docs/operations.md](docs/operations.md))",
        shown="*(none)*",
        readme=True,
    )
    trace_content: Switch = setting(
        "AGENT_TRACE_CONTENT",
        False,
        "`true`: the model-call and tool-call spans carry the messages, arguments and results"
        " (each cut to 32,000 characters)",
        shown="`false`",
    )
    encryption_key: str | None = setting(
        "AGENT_ENCRYPTION_KEY",
        None,
        "32 bytes in base64: encrypt every payload",
        shown="*(none: no encryption)*",
        used_by="all",
        readme=True,
        secret=True,
    )
    encryption_keys: str | None = setting(
        "AGENT_ENCRYPTION_KEYS",
        None,
        "`KEYID:BASE64,…`: the first encrypts, all decrypt (rotation); wins over"
        " `AGENT_ENCRYPTION_KEY`",
        shown="*(none)*",
        used_by="all",
        secret=True,
    )
    codec_token: str | None = setting(
        "AGENT_CODEC_TOKEN",
        None,
        "the bearer token the codec server requires",
        shown="*(none: loopback only)*",
        used_by="codec server",
        secret=True,
    )
    payload_store: str | None = setting(
        "AGENT_PAYLOAD_STORE",
        None,
        "`file:///PATH` or `s3://BUCKET/PREFIX`: payloads of 256 KiB and more go there, history"
        " holds a reference"
        " ([the payload store](docs/payload-store.md))",
        shown="*(none: every payload in history)*",
        used_by="all",
        readme=True,
    )
    s3_endpoint_url: Annotated[str | None, BeforeValidator(_optional(_endpoint_url))] = setting(
        "AGENT_S3_ENDPOINT_URL",
        None,
        "the endpoint of an S3-compatible store, e.g. `http://minio:9000`",
        shown="*(AWS)*",
        used_by="all, with `s3://`",
    )
    max_conversation_mb: Annotated[float | None, BeforeValidator(_optional(_megabytes))] = setting(
        "AGENT_MAX_CONVERSATION_MB",
        None,
        "with a payload store: a run's conversation budget in MB (10⁶ bytes), at most 1024;"
        " without a store it is 1.4 MB and setting this stops the worker",
        shown="`64`",
        used_by="worker, with a store",
    )
    web_users_file: str | None = setting(
        "AGENT_WEB_USERS_FILE",
        None,
        "`name:hash` lines of the people who may sign in (`web add-user`)",
        shown="*(none: local mode)*",
        used_by="web",
        readme=True,
    )
    web_secret: str | None = setting(
        "AGENT_WEB_SECRET",
        None,
        "signs the session cookies; set it to keep sessions across restarts",
        shown="*(random per start)*",
        used_by="web",
        secret=True,
    )
    approvers_file: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_APPROVERS_FILE",
        None,
        "the people who approve, their groups and keys: `NAME GROUPS KEY` lines (OpenSSH"
        " Ed25519 public keys); the worker verifies every signed answer with it"
        " (docs/approvers.md)",
        shown="*(none: no signed answers)*",
        used_by="all",
        readme=True,
    )
    signing_key: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_SIGNING_KEY",
        None,
        "`starter`'s key: an OpenSSH Ed25519 private key whose public key is a person's in"
        " AGENT_APPROVERS_FILE (`--key` wins; unset: `~/.ssh/id_ed25519` when the file has it)",
        shown="*(`~/.ssh/id_ed25519` if listed)*",
        used_by="starter",
    )
    web_signing_key: Annotated[Path | None, BeforeValidator(_optional(_folder))] = setting(
        "AGENT_WEB_SIGNING_KEY",
        None,
        "the web app's signing service key (an OpenSSH Ed25519 private key, its public key an"
        " `@service` line of AGENT_APPROVERS_FILE): it signs as the signed-in user, for the"
        " people the file lets",
        shown="*(none: the web app signs nothing)*",
        used_by="web",
    )
    approver_key: Annotated[None, BeforeValidator(_optional(_retired_approver_key))] = setting(
        "AGENT_APPROVER_KEY",
        None,
        "retired: set, every program stops (exit 2) pointing to AGENT_APPROVERS_FILE",
        shown="*(retired)*",
        used_by="all",
        secret=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Values given to the constructor, then the environment (`read`'s, else the process's),
        nothing else (no `.env` file, no secrets folder: one place, as the table documents it)."""
        reading = _READING.get()
        return init_settings, _Variables(settings_cls, os.environ if reading is None else reading)

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings of `environ` (default: the process's), and of nothing else. Raises
        BadSetting, one line naming the variable and what it accepts, for the first value it
        refuses."""
        reading = _READING.set(os.environ if environ is None else environ)
        try:
            return cls()
        except ValidationError as err:
            raise BadSetting(one_line(err)) from None
        finally:
            _READING.reset(reading)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The worker's settings: `read`, then `for_worker` (the workspace is created). Raises
        BadSetting (a ValueError) naming the variable of a value it cannot use."""
        return cls.read(environ).for_worker()

    def for_worker(self) -> Settings:
        """These settings as the worker uses them: its folders resolved (the workspace created),
        the system prompt's `@FILE` read, the payload store and the conversation budget checked,
        whether notifications carry arguments decided. Raises BadSetting (or the payload store's
        SettingError) naming the variable. The same settings again when done already."""
        if self._for_worker:
            return self
        workspace = self.workspace.expanduser().resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        conversation_budget_bytes(self._store_variables())  # a store or budget it cannot use
        ready = self.model_copy(
            update={
                "workspace": workspace,
                "state_dir": _resolved(self.state_dir),
                "mcp_config": _resolved(self.mcp_config),
                "policy_file": _resolved(self.policy_file),
                "approvers_file": _resolved(self.approvers_file),
                "system_prompt": _prompt_text(self.system_prompt),
                "notify_arguments": self.notify_with_arguments,
            }
        )
        ready._for_worker = True
        state = ready.resolved_state_dir.resolve()
        if state == workspace or workspace in state.parents:
            raise BadSetting(f"AGENT_STATE_DIR ({state}) must be outside AGENT_WORKSPACE")
        return ready

    def _store_variables(self) -> dict[str, str]:
        given = {
            ENV_STORE: self.payload_store,
            ENV_S3_ENDPOINT: self.s3_endpoint_url,
            ENV_MAX_CONVERSATION_MB: None
            if self.max_conversation_mb is None
            else repr(self.max_conversation_mb),
        }
        return {name: value for name, value in given.items() if value is not None}

    @property
    def encryption_on(self) -> bool:
        """Whether an encryption key is set (the data converter checks the keys themselves)."""
        return bool(self.encryption_key or self.encryption_keys)

    @property
    def provider(self) -> str:
        """`openai-compatible` (LLM_BASE_URL points at an endpoint) or `scripted` (the offline,
        rule-based stand-in)."""
        return "openai-compatible" if self.llm_base_url else "scripted"

    @property
    def resolved_state_dir(self) -> Path:
        """`AGENT_STATE_DIR`, else a `.agent-state` folder beside the workspace."""
        if self.state_dir is not None:
            return self.state_dir
        return self.workspace.parent / STATE_DIR_NAME

    @property
    def conversation_bytes(self) -> int:
        """How big a run's conversation may grow: 1.4 MB, or with a payload store
        `AGENT_MAX_CONVERSATION_MB` (default 64) in units of 10^6 bytes."""
        if self.payload_store is None:
            return MAX_CONVERSATION_BYTES
        return int((self.max_conversation_mb or DEFAULT_MAX_CONVERSATION_MB) * 1_000_000)

    @property
    def notify_with_arguments(self) -> bool:
        """Whether notifications carry the call's arguments (and a failed run's error text):
        `AGENT_NOTIFY_ARGUMENTS`, by default true without encryption and false with it (what is
        sealed in history does not go out in the clear unless asked for)."""
        if self.notify_arguments is not None:
            return self.notify_arguments
        return not self.encryption_on


def _resolved(path: Path | None) -> Path | None:
    return path.expanduser().resolve() if path is not None else None


def _prompt_text(raw: str | None) -> str | None:
    """`AGENT_SYSTEM_PROMPT`: the text itself, or `@FILE` to read it from a file (once)."""
    if raw is None:
        return None
    if not raw.startswith("@"):
        return raw.strip()
    path = Path(raw[1:].strip()).expanduser()
    try:
        data = path.read_bytes()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise BadSetting(
            f"AGENT_SYSTEM_PROMPT names {str(path)!r}, which cannot be read: {reason}"
        ) from None
    if len(data) > MAX_SYSTEM_PROMPT_BYTES:
        raise BadSetting(
            f"AGENT_SYSTEM_PROMPT file {str(path)!r} has {len(data):,} bytes, more than the"
            f" {MAX_SYSTEM_PROMPT_BYTES:,} a system prompt may have"
        )
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadSetting(f"AGENT_SYSTEM_PROMPT file {str(path)!r} is not UTF-8 text") from None
    if not text:
        raise BadSetting(f"AGENT_SYSTEM_PROMPT file {str(path)!r} is empty")
    return text


def variables() -> dict[str, FieldInfo]:
    """Every setting's field by its variable's name, in the order of the table."""
    return {str(f.validation_alias): f for f in Settings.model_fields.values()}


PREFIXES = ("AGENT_", "LLM_")
"""The prefixes of the settings' variables: another variable with one of them is a mistake."""
ALSO_READ: dict[str, str] = {
    "AGENT_TEST_PROCESSES": "`./run tests`: how many test processes",
    "AGENT_TEST_CHROMIUM": "the web inbox's browser tests and bench/web_inbox.py: the Chromium",
    "AGENT_SCREENSHOT_TO": "tests/web/test_browser.py: where the docs' screenshot is written",
    "AGENT_RUNS_LOAD_COUNT": "tests/web/test_runs_load.py: how many finished runs are listed",
    "AGENT_E2E_LLM_BASE_URL": "tests/e2e/test_real_model_server.py: a real model server",
    "AGENT_E2E_LLM_MODEL": "tests/e2e/test_real_model_server.py: its model",
    "AGENT_E2E_LLM_API_KEY": "tests/e2e/test_real_model_server.py: its key",
    "AGENT_E2E_LLM_MAX_TOKENS": "tests/e2e/test_real_model_server.py: tokens per reply",
    "AGENT_E2E_LLM_TIMEOUT_SECONDS": "tests/e2e/test_real_model_server.py: the whole story's time",
}
"""Variables with a settings' prefix that no program reads but the project's tests and tools do:
set for them, they are in the environment of every program the tests start, and are not named."""
_LONGEST_SHOWN = 100


def _shown_name(name: str) -> str:
    """A variable's name as a warning may print it: quoted when it is not a plain name."""
    if _ENV_NAME.fullmatch(name) and len(name) <= _LONGEST_SHOWN:
        return name
    return repr(name[:_LONGEST_SHOWN])


def _stem(name: str) -> str:
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _nearest(name: str, known: list[str]) -> str | None:
    """The known name nearest to `name` (difflib), compared without the prefixes, which every
    name shares (`AGENT_QQQ` is near no setting; `LLM_WORKSPACE` is near `AGENT_WORKSPACE`)."""
    by_stem: dict[str, list[str]] = {}
    for each in known:
        by_stem.setdefault(_stem(each), []).append(each)
    found = difflib.get_close_matches(_stem(name), list(by_stem), n=1)
    if not found:
        return None
    return max(
        by_stem[found[0]], key=lambda each: difflib.SequenceMatcher(None, name, each).ratio()
    )


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning line for each variable of `environ` (default: the process's) that starts with
    `AGENT_` or `LLM_` and is no setting, naming the nearest setting, in the order of the names.
    Not named: the settings, `ALSO_READ`, and the variables `AGENT_COMMAND_ENV` passes on to the
    commands (those are read, by the commands)."""
    env = os.environ if environ is None else environ
    known = sorted({*variables(), *ALSO_READ})
    passed = set(re.split(r"[\s,]+", env.get("AGENT_COMMAND_ENV", "")))
    lines = []
    for name in sorted(env):
        if not name.startswith(PREFIXES) or name in known or name in passed:
            continue
        nearest = _nearest(name, known)
        hint = f" (did you mean {nearest}?)" if nearest else ""
        lines.append(f"warning: {_shown_name(name)} is not a setting{hint}; ignored")
    return lines


def warn_unknown_settings(
    prefix: str = "", environ: Mapping[str, str] | None = None, file: TextIO | None = None
) -> None:
    """What every program does at start: `unknown_settings` on stderr (`file`), each line after
    `prefix` (the worker's `worker: `). Never stops the program, never writes to stdout."""
    for line in unknown_settings(environ):
        print(f"{prefix}{line}", file=sys.stderr if file is None else file, flush=True)
