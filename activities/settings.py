"""Worker settings, read from the environment. Only the worker sees these: the LLM
endpoint and key never enter workflow input, events or history."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from activities.redaction import redact_url
from activities.text_calls import TEXT_CALL_MODES, TextCallMode
from activities.tools.sandbox import SANDBOX_MODES, SandboxMode
from runtime.codec import ENV_KEY, ENV_KEYS
from runtime.payload_store import conversation_budget_bytes, parse_store

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_WORKSPACE = "agent-workspace"
STATE_DIR_NAME = ".agent-state"
MAX_SYSTEM_PROMPT_BYTES = 100_000
"""The longest `AGENT_SYSTEM_PROMPT` (or its file) the worker takes: it goes with every request."""

_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NotifyFormat = Literal["json", "slack"]
NOTIFY_FORMATS: tuple[NotifyFormat, ...] = ("json", "slack")
_TOOL_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def _sandbox_mode(environ: Mapping[str, str]) -> SandboxMode:
    raw = (environ.get("AGENT_SANDBOX") or "auto").strip().lower()
    for mode in SANDBOX_MODES:
        if raw == mode:
            return mode
    raise ValueError(f"AGENT_SANDBOX must be one of {', '.join(SANDBOX_MODES)}, got {raw!r}")


def _env_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    names = re.split(r"[\s,]+", (environ.get("AGENT_COMMAND_ENV") or "").strip())
    names = [n for n in names if n]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"AGENT_COMMAND_ENV lists {name!r}, which is not a variable name")
    return tuple(dict.fromkeys(names))


def _tool_specs(environ: Mapping[str, str]) -> tuple[str, ...]:
    specs = [s.strip() for s in (environ.get("AGENT_TOOLS") or "").split(",")]
    specs = [s for s in specs if s]
    for spec in specs:
        if not _TOOL_SPEC.fullmatch(spec):
            raise ValueError(f"AGENT_TOOLS lists {spec!r}, which is not package.module:attribute")
    return tuple(dict.fromkeys(specs))


def _float(environ: Mapping[str, str], key: str, default: float) -> float:
    raw = (environ.get(key) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as err:
        raise ValueError(f"{key} must be a number of seconds, got {raw!r}") from err
    if value <= 0:
        raise ValueError(f"{key} must be positive, got {raw!r}")
    return value


def _boolean(environ: Mapping[str, str], key: str, default: bool) -> bool:
    """A setting that is on or off; anything else is refused (a typo must not flip it)."""
    raw = (environ.get(key) or "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{key} must be true or false, got {raw!r}")


def _text_call_mode(environ: Mapping[str, str]) -> TextCallMode:
    raw = (environ.get("LLM_TEXT_TOOL_CALLS") or "parse").strip().lower()
    for mode in TEXT_CALL_MODES:
        if raw == mode:
            return mode
    choices = ", ".join(TEXT_CALL_MODES)
    raise ValueError(f"LLM_TEXT_TOOL_CALLS must be one of {choices}, got {raw!r}")


def _system_prompt(environ: Mapping[str, str]) -> str | None:
    """`AGENT_SYSTEM_PROMPT`: the text itself, or `@FILE` to read it from a file (once)."""
    raw = environ.get("AGENT_SYSTEM_PROMPT") or ""
    if not raw.strip():
        return None
    if not raw.startswith("@"):
        text = raw.strip()
    else:
        path = Path(raw[1:].strip()).expanduser()
        try:
            data = path.read_bytes()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise ValueError(
                f"AGENT_SYSTEM_PROMPT names {str(path)!r}, which cannot be read: {reason}"
            ) from None
        if len(data) > MAX_SYSTEM_PROMPT_BYTES:
            raise ValueError(
                f"AGENT_SYSTEM_PROMPT file {str(path)!r} has {len(data):,} bytes, more than the"
                f" {MAX_SYSTEM_PROMPT_BYTES:,} a system prompt may have"
            )
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ValueError(f"AGENT_SYSTEM_PROMPT file {str(path)!r} is not UTF-8 text") from None
        if not text:
            raise ValueError(f"AGENT_SYSTEM_PROMPT file {str(path)!r} is empty")
    if len(text.encode("utf-8")) > MAX_SYSTEM_PROMPT_BYTES:
        raise ValueError(
            f"AGENT_SYSTEM_PROMPT has more than the {MAX_SYSTEM_PROMPT_BYTES:,} bytes a system"
            " prompt may have"
        )
    return text


def _positive_int(environ: Mapping[str, str], key: str) -> int | None:
    raw = (environ.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{key} must be a positive whole number, got {raw!r}")
    return value


def _days(environ: Mapping[str, str], key: str, default: float) -> float:
    raw = (environ.get(key) or "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{key} must be a positive number of days, got {raw!r}")
    return value


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


def shown_notify_url(url: str) -> str:
    """`AGENT_NOTIFY_URL` as it may be shown: scheme, host and port only. Its path is as secret as
    its user info and query (a Slack webhook's path is its token), so it is never printed."""
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
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{where}{rest}"


def _http_url(raw: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(raw)
        _ = parts.port  # a port that is not a number raises here
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed `[` of an IPv6 host, a port that is not a number
        return False


def _notify_url(environ: Mapping[str, str]) -> str | None:
    raw = (environ.get("AGENT_NOTIFY_URL") or "").strip()
    if not raw:
        return None
    if not _http_url(raw):
        raise ValueError(
            f"AGENT_NOTIFY_URL must be an http:// or https:// URL, got {shown_notify_url(raw)!r}"
        )
    return raw


def _notify_format(environ: Mapping[str, str]) -> NotifyFormat:
    raw = (environ.get("AGENT_NOTIFY_FORMAT") or "json").strip().lower()
    for choice in NOTIFY_FORMATS:
        if raw == choice:
            return choice
    raise ValueError(
        f"AGENT_NOTIFY_FORMAT must be one of {', '.join(NOTIFY_FORMATS)}, got {raw[:40]!r}"
    )


def _inbox_url(environ: Mapping[str, str]) -> str | None:
    """`AGENT_INBOX_URL`: where people open the web inbox; notifications link to its run pages.
    It goes out with every notification, so it may carry no credentials."""
    raw = (environ.get("AGENT_INBOX_URL") or "").strip()
    if not raw:
        return None
    if not _http_url(raw):
        raise ValueError(
            f"AGENT_INBOX_URL must be an http:// or https:// URL, got {redact_url(raw)[:200]!r}"
        )
    parts = urllib.parse.urlsplit(raw)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            "AGENT_INBOX_URL must be the web inbox's address (http(s)://HOST[:PORT][/PATH]),"
            f" without user info, query or fragment: got {redact_url(raw)[:200]!r}"
        )
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def encryption_on(environ: Mapping[str, str]) -> bool:
    """Whether an encryption key is set (AGENT_ENCRYPTION_KEY or AGENT_ENCRYPTION_KEYS; the data
    converter checks the keys themselves)."""
    return bool((environ.get(ENV_KEYS) or "").strip() or (environ.get(ENV_KEY) or "").strip())


def _base_url(environ: Mapping[str, str]) -> str | None:
    raw = (environ.get("LLM_BASE_URL") or "").strip()
    if not raw:
        return None
    try:
        parts = urllib.parse.urlsplit(raw)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed `[` of an IPv6 host
        usable = False
    if not usable:
        raise ValueError(
            f"LLM_BASE_URL must be an http:// or https:// URL, got {redact_url(raw)!r}"
        )
    # A trailing `/` of the path goes (the client adds `/chat/completions`); a query stays as it is.
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


@dataclass(frozen=True)
class Settings:
    llm_base_url: str | None = field(repr=False)
    """`LLM_BASE_URL`, e.g. `https://api.openai.com/v1`; None: the offline `scripted` model.
    Not in the repr: it may carry credentials (user info, a query key)."""
    llm_api_key: str | None = field(repr=False)
    """`LLM_API_KEY`; never printed or logged, only sent in the Authorization header."""
    llm_model: str
    """`LLM_MODEL` (default `gpt-4o-mini`); a run's `options.model` overrides it."""
    workspace: Path
    """`AGENT_WORKSPACE`: the only folder the built-in tools may touch."""
    command_timeout_seconds: float = 30.0
    """`AGENT_COMMAND_TIMEOUT_SECONDS`: how long `run_command` may run."""
    llm_stream: bool = True
    """`LLM_STREAM=false` sends non-streaming requests."""
    state_dir: Path | None = None
    """`AGENT_STATE_DIR`: idempotency markers of tools that are not safe to retry. Must be outside
    the workspace; default: a `.agent-state` folder next to it."""
    llm_timeout_seconds: float = 120.0
    """`LLM_TIMEOUT_SECONDS`: the longest silence tolerated from the provider (per read)."""
    llm_max_wait: float = 600.0
    """`LLM_MAX_WAIT`: seconds a model call keeps trying a server that cannot be reached (every
    attempt tells the run); then the run ends with an error. Default 10 minutes."""
    llm_max_tokens: int | None = None
    """`LLM_MAX_TOKENS`: the most tokens a reply may have (sent as `max_tokens`); a run's
    `options.max_tokens` wins. None: nothing is sent, the server's own limit applies."""
    stream_deltas: bool = True
    """`AGENT_STREAM_DELTAS=false`: `call_llm` does not publish the model's text live (the
    workflow's own events are still on the live stream)."""
    stream_flush_seconds: float = 1.0
    """`AGENT_STREAM_FLUSH_SECONDS`: how often streamed text is sent to the workflow (one
    signal and about four history events per flush: a 10 s reply costs ~40 events at the
    default, where 0.2 s would cost ~200; lower it for snappier output, raise it for leaner
    history)."""
    stream_flush_chars: int = 2_000
    """`AGENT_STREAM_FLUSH_CHARS`: send earlier when this much text is waiting."""
    sandbox: SandboxMode = "auto"
    """`AGENT_SANDBOX`: how `run_command` is isolated. `auto` (default): in bubblewrap when it
    works on this machine, else as a plain process group (the worker warns); `required`: the
    worker refuses to start without bubblewrap; `off`: never sandboxed."""
    command_env: tuple[str, ...] = ()
    """`AGENT_COMMAND_ENV`: names (comma- or space-separated) of the worker's variables that
    commands get, on top of PATH, HOME (set to the workspace) and LANG. Nothing else is passed."""
    command_network: bool = False
    """`AGENT_COMMAND_NETWORK=true`: sandboxed commands get their own network with an uplink
    (slirp4netns; never the host's loopback). Default: no network."""
    command_max_processes: int = 256
    """`AGENT_COMMAND_MAX_PROCESSES`: processes and threads one command may have."""
    command_max_memory_mb: int = 1024
    """`AGENT_COMMAND_MAX_MEMORY_MB`: memory one command may use in all (MiB)."""
    state_retention_days: float = 30.0
    """`AGENT_STATE_RETENTION_DAYS`: at-most-once records older than this are removed."""
    tools: tuple[str, ...] = ()
    """`AGENT_TOOLS`: your own tools, as `package.module:attribute` (comma-separated), each a
    `Tool`, an iterable of them, or a callable returning them; loaded beside the built-ins."""
    builtin_tools: bool = True
    """`AGENT_BUILTIN_TOOLS=false` (or `0`, `no`): leave the four built-in file tools out."""
    mcp_config: Path | None = None
    """`AGENT_MCP_CONFIG`: a JSON file in the `mcpServers` format; the worker starts those servers
    and offers their tools as `NAME__TOOL`."""
    policy_file: Path | None = None
    """`AGENT_POLICY_FILE`: the worker's approval rules, `{"enforced": [...], "defaults": [...]}`:
    enforced rules come before every run's, defaults after them. Read once, at start."""
    llm_text_tool_calls: TextCallMode = "parse"
    """`LLM_TEXT_TOOL_CALLS`: what to do with a reply whose whole text is a tool call written as
    text: `parse` takes it as the call(s) when it is in a call's syntax (`<tool_call>…</tool_call>`,
    one fenced `json` block), `bare` also when it is only a bare JSON object, `warn` leaves it as
    text with a warning, `off` does neither."""
    llm_parallel_tool_calls: bool = True
    """`LLM_PARALLEL_TOOL_CALLS`: sent as `parallel_tool_calls` with the tools (llama.cpp's own
    default is false: one call per reply)."""
    system_prompt: str | None = field(default=None, repr=False)
    """`AGENT_SYSTEM_PROMPT` (the text, or `@FILE`): sent as the first message of a run whose
    conversation has no system message. Not in the repr: it may be long."""
    llm_context_tokens: int | None = None
    """`LLM_CONTEXT_TOKENS`: the model's context window; None: what the server says (llama.cpp's
    `GET /props`), else 128,000."""
    llm_summary_model: str | None = None
    """`LLM_SUMMARY_MODEL`: the model that writes compaction summaries; None: the run's model."""
    conversation_bytes: int = 1_400_000
    """How big a run's conversation may grow: 1.4 MB, or with a payload store
    (`AGENT_PAYLOAD_STORE`) `AGENT_MAX_CONVERSATION_MB` (default 64)."""
    payload_store: bool = False
    """Whether `AGENT_PAYLOAD_STORE` is set (every program needs the same setting)."""
    notify_url: str | None = field(default=None, repr=False)
    """`AGENT_NOTIFY_URL`: where `notify` POSTs when a call waits for a person (http or https).
    Not in the repr: its path, user info or query may be a token (a Slack webhook's is)."""
    notify_format: NotifyFormat = "json"
    """`AGENT_NOTIFY_FORMAT`: `json` (the agent's own body) or `slack` (an incoming webhook's
    `{"text": …}`)."""
    notify_arguments: bool = True
    """Whether notifications carry the call's arguments (and a failed run's error text):
    `AGENT_NOTIFY_ARGUMENTS`, by default true without encryption and false with it (what is
    sealed in history does not go out in the clear unless asked for)."""
    inbox_url: str | None = None
    """`AGENT_INBOX_URL`: the web inbox's address; a notification links to `INBOX/runs/{id}`."""
    trace_content: bool = False
    """`AGENT_TRACE_CONTENT=true`: the model-call and tool-call spans carry the messages, the
    arguments and the results (default: names, sizes and outcomes only)."""

    @property
    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        return self.workspace.parent / STATE_DIR_NAME

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings; creates the workspace folder when it is missing."""
        env = os.environ if environ is None else environ
        base_url = _base_url(env)
        api_key = (env.get("LLM_API_KEY") or "").strip() or None
        problem = api_key_problem(api_key) if api_key else None
        if problem:
            raise ValueError(problem)
        model = (env.get("LLM_MODEL") or "").strip() or DEFAULT_MODEL
        workspace = Path(env.get("AGENT_WORKSPACE") or DEFAULT_WORKSPACE).expanduser().resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        state_raw = (env.get("AGENT_STATE_DIR") or "").strip()
        state_dir = Path(state_raw).expanduser().resolve() if state_raw else None
        mcp_raw = (env.get("AGENT_MCP_CONFIG") or "").strip()
        policy_raw = (env.get("AGENT_POLICY_FILE") or "").strip()
        stream = (env.get("LLM_STREAM") or "true").strip().lower() not in _FALSE
        stream_deltas = (env.get("AGENT_STREAM_DELTAS") or "true").strip().lower() not in _FALSE
        flush_chars = int(_float(env, "AGENT_STREAM_FLUSH_CHARS", 2_000))
        settings = cls(
            llm_base_url=base_url,
            llm_api_key=api_key,
            llm_model=model,
            workspace=workspace,
            command_timeout_seconds=_float(env, "AGENT_COMMAND_TIMEOUT_SECONDS", 30.0),
            llm_stream=stream,
            state_dir=state_dir,
            llm_timeout_seconds=_float(env, "LLM_TIMEOUT_SECONDS", 120.0),
            llm_max_tokens=_positive_int(env, "LLM_MAX_TOKENS"),
            llm_max_wait=_float(env, "LLM_MAX_WAIT", 600.0),
            stream_deltas=stream_deltas,
            stream_flush_seconds=_float(env, "AGENT_STREAM_FLUSH_SECONDS", 1.0),
            stream_flush_chars=max(1, flush_chars),
            sandbox=_sandbox_mode(env),
            command_env=_env_names(env),
            command_network=(env.get("AGENT_COMMAND_NETWORK") or "").strip().lower() in _TRUE,
            command_max_processes=_positive_int(env, "AGENT_COMMAND_MAX_PROCESSES") or 256,
            command_max_memory_mb=_positive_int(env, "AGENT_COMMAND_MAX_MEMORY_MB") or 1024,
            state_retention_days=_days(env, "AGENT_STATE_RETENTION_DAYS", 30.0),
            tools=_tool_specs(env),
            builtin_tools=(env.get("AGENT_BUILTIN_TOOLS") or "true").strip().lower() not in _FALSE,
            mcp_config=Path(mcp_raw).expanduser().resolve() if mcp_raw else None,
            policy_file=Path(policy_raw).expanduser().resolve() if policy_raw else None,
            llm_text_tool_calls=_text_call_mode(env),
            llm_parallel_tool_calls=_boolean(env, "LLM_PARALLEL_TOOL_CALLS", True),
            system_prompt=_system_prompt(env),
            llm_context_tokens=_positive_int(env, "LLM_CONTEXT_TOKENS"),
            llm_summary_model=(env.get("LLM_SUMMARY_MODEL") or "").strip() or None,
            conversation_bytes=conversation_budget_bytes(env),
            payload_store=parse_store(env) is not None,
            notify_url=_notify_url(env),
            notify_format=_notify_format(env),
            notify_arguments=_boolean(env, "AGENT_NOTIFY_ARGUMENTS", not encryption_on(env)),
            inbox_url=_inbox_url(env),
            trace_content=_boolean(env, "AGENT_TRACE_CONTENT", False),
        )
        state = settings.resolved_state_dir.resolve()
        if state == workspace or workspace in state.parents:
            raise ValueError(f"AGENT_STATE_DIR ({state}) must be outside AGENT_WORKSPACE")
        return settings

    @property
    def provider(self) -> str:
        """`openai-compatible` (LLM_BASE_URL points at an endpoint) or `scripted` (the offline,
        rule-based stand-in)."""
        return "openai-compatible" if self.llm_base_url else "scripted"
