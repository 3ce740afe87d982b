"""Worker settings, read from the environment. Only the worker sees these: the LLM
endpoint and key never enter workflow input, events or history.

`Settings.from_env` reads them through `activities.environment.Environment` (every setting typed,
in one place, with one line naming the variable for a value it refuses) and resolves what only
the worker may: its folders (the workspace is created) and the system prompt's file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from activities.environment import (
    DEFAULT_MODEL,
    DEFAULT_WORKSPACE,
    MAX_SYSTEM_PROMPT_BYTES,
    BadSetting,
    Environment,
    api_key_problem,
    approver_key_bytes,
    shown_notify_url,
)
from runtime.modes import NOTIFY_FORMATS, NotifyFormat, SandboxMode, TextCallMode
from runtime.payload_store import conversation_budget_bytes, parse_store

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_WORKSPACE",
    "MAX_SYSTEM_PROMPT_BYTES",
    "NOTIFY_FORMATS",
    "STATE_DIR_NAME",
    "NotifyFormat",
    "Settings",
    "api_key_problem",
    "shown_notify_url",
]

STATE_DIR_NAME = ".agent-state"


def _system_prompt(raw: str | None) -> str | None:
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


def _path(raw: str | None) -> Path | None:
    return Path(raw).expanduser().resolve() if raw else None


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
    max_run_tokens: int | None = None
    """`AGENT_MAX_RUN_TOKENS`: the cap on a run's token budget (a run's `max_run_tokens` may be
    lower, never higher); None: runs have a budget only when they ask for one."""
    budget_groups: tuple[str, ...] = ()
    """`AGENT_BUDGET_GROUPS`: the groups whose people alone may grant tokens or stop a run at its
    budget; empty: anyone who may answer."""
    escalate_after_seconds: float | None = None
    """`AGENT_ESCALATE_AFTER_SECONDS`: a run's default `approval_escalate_after_seconds`."""
    escalate_to: tuple[str, ...] = ()
    """`AGENT_ESCALATE_TO`: a run's default `approval_escalate_to` (groups)."""
    trace_content: bool = False
    """`AGENT_TRACE_CONTENT=true`: the model-call and tool-call spans carry the messages, the
    arguments and the results (default: names, sizes and outcomes only)."""
    approver_key: bytes | None = field(default=None, repr=False)
    """`AGENT_APPROVER_KEY`'s 32 bytes: the worker checks signed answers with it
    (`verify_answer`) and re-checks the votes of a call under an approver rule before it runs."""
    ask_user: bool = False
    """`AGENT_ASK_USER=true`: runs that do not set `options.ask_user` offer the model `ask_user`."""

    @property
    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        return self.workspace.parent / STATE_DIR_NAME

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings; creates the workspace folder when it is missing. Raises
        BadSetting (a ValueError) naming the variable of a value it cannot use."""
        env = os.environ if environ is None else environ
        return cls.of(Environment.read(env), env)

    @classmethod
    def of(cls, given: Environment, environ: Mapping[str, str]) -> Settings:
        """The worker's settings from checked ones: folders resolved (the workspace created), the
        system prompt's file read; `environ` for the payload store's budget."""
        workspace = Path(given.workspace).expanduser().resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        notify_arguments = given.notify_arguments
        settings = cls(
            llm_base_url=given.llm_base_url,
            llm_api_key=given.llm_api_key,
            llm_model=given.llm_model,
            workspace=workspace,
            command_timeout_seconds=given.command_timeout_seconds,
            llm_stream=given.llm_stream,
            state_dir=_path(given.state_dir),
            llm_timeout_seconds=given.llm_timeout_seconds,
            llm_max_wait=given.llm_max_wait,
            llm_max_tokens=given.llm_max_tokens,
            stream_deltas=given.stream_deltas,
            stream_flush_seconds=given.stream_flush_seconds,
            stream_flush_chars=max(1, int(given.stream_flush_chars)),
            sandbox=given.sandbox,
            command_env=given.command_env,
            command_network=given.command_network,
            command_max_processes=given.command_max_processes,
            command_max_memory_mb=given.command_max_memory_mb,
            state_retention_days=given.state_retention_days,
            tools=given.tools,
            builtin_tools=given.builtin_tools,
            mcp_config=_path(given.mcp_config),
            policy_file=_path(given.policy_file),
            llm_text_tool_calls=given.llm_text_tool_calls,
            llm_parallel_tool_calls=given.llm_parallel_tool_calls,
            system_prompt=_system_prompt(given.system_prompt),
            llm_context_tokens=given.llm_context_tokens,
            llm_summary_model=given.llm_summary_model,
            conversation_bytes=conversation_budget_bytes(environ),
            payload_store=parse_store(environ) is not None,
            notify_url=given.notify_url,
            notify_format=given.notify_format,
            notify_arguments=(
                notify_arguments if notify_arguments is not None else not given.encryption_on
            ),
            inbox_url=given.inbox_url,
            trace_content=given.trace_content,
            approver_key=approver_key_bytes(given.approver_key) if given.approver_key else None,
            ask_user=given.ask_user,
            max_run_tokens=given.max_run_tokens,
            budget_groups=given.budget_groups,
            escalate_after_seconds=given.escalate_after_seconds,
            escalate_to=given.escalate_to,
        )
        state = settings.resolved_state_dir.resolve()
        if state == workspace or workspace in state.parents:
            raise BadSetting(f"AGENT_STATE_DIR ({state}) must be outside AGENT_WORKSPACE")
        return settings

    @property
    def provider(self) -> str:
        """`openai-compatible` (LLM_BASE_URL points at an endpoint) or `scripted` (the offline,
        rule-based stand-in)."""
        return "openai-compatible" if self.llm_base_url else "scripted"
