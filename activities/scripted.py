"""The `scripted` model: a deterministic, rule-based file-manager assistant that needs no network.

It is NOT a language model. It plays the file-manager story (list the workspace, ask to delete a
folder, hear back an approval or a rejection, report) so that the demo and the tests run offline.
It only looks at the conversation since the last user message:

- last message from the user:
  - "run: <command>" or "run `<command>`" → `run_command {"command": …}`;
  - "delete X" / "remove X" → `list_dir {"path": "."}` first (then `delete_path` if X is there);
  - "read X" → `read_file {"path": X}`; "list" / "ls" → `list_dir {"path": "."}`;
  - "ask me: QUESTION (options: A, B)" → `ask_user` (options optional; "(any of: A, B)" lets
    the person choose several), when the run offers it;
  - "delegate: TASK" → `delegate {"task": TASK}`, when the run offers it (a sub-agent's
    conversation then starts with TASK, which works as any prompt: "delegate: delete the logs
    folder"); "delegate: A; delegate: B" → two calls in one reply; "delegate (max_rounds 1;
    tools: list_dir, read_file): TASK" passes `max_rounds` and `tools`; "delegate: delegate:
    TASK" hands the delegation itself down;
  - anything else → a short text saying what it is and what it can do;
- after tool results: a rejection (`Rejected: …`) is acknowledged with its reason, a result is
  summarised, an error envelope is reported.

Tool call ids are `call_<k>`, k = 1 + the number of tool calls already in the conversation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workflows.bounds import arguments_text
from workflows.contract.arguments import parse_arguments
from workflows.model import ChatMessage, LlmResponse, ToolCall, Usage
from workflows.shown import ELLIPSIS, shorten

HELP_TEXT = (
    "I am a scripted file-manager assistant (a fixed set of rules, not a language model). "
    "I can list the workspace ('list'), read a file ('read notes.txt'), delete a file or folder "
    "('delete logs') and run a shell command ('run: ls -la'). Deleting and running commands "
    "wait for a human's approval."
)
PREVIEW_CHARS = 400
SUMMARY_LINE_CHARS = 120
SUMMARY_CHARS = 2_000
REJECTED_PREFIX = "Rejected: "

_RUN_COLON = re.compile(r"\brun\s*:\s*(?P<command>.+)", re.IGNORECASE | re.DOTALL)
_RUN_TICKS = re.compile(r"\brun\s+`(?P<command>[^`]+)`", re.IGNORECASE)
_DELETE = re.compile(
    r"\b(?:delete|remove)\s+(?:the\s+)?(?:(?:file|folder|directory|dir)\s+)?(?P<path>\S+)",
    re.IGNORECASE,
)
_READ = re.compile(r"\b(?:read|cat)\s+(?:the\s+)?(?:file\s+)?(?P<path>\S+)", re.IGNORECASE)
_LIST = re.compile(r"\b(?:list|ls)\b", re.IGNORECASE)
_ASK = re.compile(r"\bask\s+me\s*:\s*(?P<question>.+)", re.IGNORECASE | re.DOTALL)
_DELEGATE_TO = re.compile(
    r"^\W*delegate\s*(?:\((?P<options>[^)]*)\))?\s*:\s*(?P<task>.+)", re.IGNORECASE | re.DOTALL
)
_MORE_DELEGATIONS = re.compile(r";\s*(?=delegate\s*(?:\([^)]*\))?\s*:)", re.IGNORECASE)
_CHOICES = re.compile(r"\((?P<kind>options|any of)\s*:\s*(?P<options>[^)]*)\)\s*$", re.IGNORECASE)
_STRIP = "'\"`“”‘’.,;:!?()[]{}<>"


@dataclass(frozen=True)
class Intent:
    kind: str  # "delegate", "ask", "run", "delete", "read", "list" or "help"
    argument: str = ""


def clean_path(token: str) -> str:
    """A path token as the user typed it, without quotes, backticks or trailing punctuation."""
    path = token.strip().strip(_STRIP)
    return path or token.strip()


def parse_intent(text: str) -> Intent:
    if _DELEGATE_TO.match(text):
        return Intent("delegate", text.strip())
    match = _ASK.search(text)
    if match and match.group("question").strip():
        return Intent("ask", match.group("question").strip())
    for pattern in (_RUN_COLON, _RUN_TICKS):
        match = pattern.search(text)
        if match and match.group("command").strip():
            command = match.group("command").strip()
            if pattern is _RUN_COLON:
                command = command.strip("`").strip()
            return Intent("run", command)
    match = _DELETE.search(text)
    if match:
        return Intent("delete", clean_path(match.group("path")))
    match = _READ.search(text)
    if match:
        return Intent("read", clean_path(match.group("path")))
    if _LIST.search(text):
        return Intent("list")
    return Intent("help")


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _message_chars(message: ChatMessage) -> str:
    calls = "".join(c.name + arguments_text(c.arguments) for c in message.tool_calls or [])
    return message.content + calls


class _Reply:
    def __init__(self, messages: Sequence[ChatMessage], tool_names: Sequence[str]) -> None:
        self.messages = messages
        self.tools = set(tool_names)
        self.calls_so_far = sum(len(m.tool_calls or []) for m in messages if m.role == "assistant")

    def respond(self, message: ChatMessage) -> LlmResponse:
        prompt = sum(_estimate_tokens(_message_chars(m)) for m in self.messages)
        return LlmResponse(
            message=message,
            usage=Usage(
                prompt_tokens=prompt, completion_tokens=_estimate_tokens(_message_chars(message))
            ),
        )

    def text(self, text: str) -> LlmResponse:
        return self.respond(ChatMessage.assistant(text))

    def call(self, name: str, arguments: dict[str, Any], text: str = "") -> LlmResponse:
        return self.calls(name, [arguments], text)

    def calls(self, name: str, arguments: list[dict[str, Any]], text: str = "") -> LlmResponse:
        """One reply calling `name` once per item of `arguments` (ids `call_k`, `call_k+1`, …)."""
        if name not in self.tools:
            return self.text(
                f"I would use the {name} tool for that, but it is not available in this run."
            )
        made = [
            ToolCall(id=f"call_{self.calls_so_far + n}", name=name, arguments=json.dumps(a))
            for n, a in enumerate(arguments, start=1)
        ]
        return self.respond(ChatMessage.assistant(text, made))


def _last_user_index(messages: Sequence[ChatMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return None


def _envelope(content: str) -> dict[str, Any] | None:
    try:
        value = json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) and "ok" in value else None


def _argument(call: ToolCall, key: str) -> str:
    parsed = parse_arguments(call.arguments)
    if parsed.ok and isinstance(parsed.value, dict):
        value = parsed.value.get(key)
        if isinstance(value, str):
            return value
    return ""


def _preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    return shorten(text.rstrip(), limit, ELLIPSIS)


def _action(call: ToolCall) -> str:
    if call.name == "delete_path":
        return f"delete {_argument(call, 'path') or 'it'}"
    if call.name == "run_command":
        return f"run `{_argument(call, 'command')}`"
    return f"run {call.name}"


def _summarise(call: ToolCall, content: str) -> str:
    if content.startswith(REJECTED_PREFIX):
        reason = content[len(REJECTED_PREFIX) :].strip().rstrip(".") or "none given"
        return f"Understood — I did not {_action(call)}. Your reason: {reason}."
    envelope = _envelope(content)
    if envelope is None:
        return f"The {call.name} tool did not run: {_preview(content, 200)}"
    if call.name == "delegate" and envelope.get("ok"):
        data = envelope.get("data")
        if isinstance(data, dict):
            said = _preview(str(data.get("answer") or ""), 600)
            return f"Sub-agent {data.get('workflow_id')} answered: {said}"
    if call.name == "ask_user":
        data = envelope.get("data")
        answer = data.get("answer") if isinstance(data, dict) else None
        if not envelope.get("ok") or answer is None:
            return f"I got no answer: {envelope.get('error')}"
        if isinstance(answer, list):
            return "You chose: " + ", ".join(str(a) for a in answer) + "."
        return f"You answered: {_preview(str(answer), 200)}"
    if not envelope.get("ok"):
        return f"The {call.name} tool failed: {envelope.get('error')}"
    data = envelope.get("data")
    if call.name == "delete_path" and isinstance(data, dict):
        kind = {"dir": "a folder", "file": "a file", "symlink": "a symlink"}.get(
            str(data.get("kind")), "an entry"
        )
        files = data.get("files")
        path = data.get("path") or _argument(call, "path")
        detail = f" with {files} file(s)" if kind == "a folder" else ""
        return f"Deleted {path}. It was {kind}{detail}."
    if call.name == "run_command" and isinstance(data, dict):
        stdout = str(data.get("stdout") or "")
        text = f"`{_argument(call, 'command')}` exited with code {data.get('exit_code')}."
        if stdout.strip():
            text += f" Output:\n{_preview(stdout)}"
        else:
            text += " It printed nothing."
        stderr = str(data.get("stderr") or "")
        if stderr.strip():
            text += f"\nErrors:\n{_preview(stderr, 200)}"
        return text
    if call.name == "read_file" and isinstance(data, str):
        return f"{_argument(call, 'path')} begins with:\n{_preview(data)}"
    if call.name == "list_dir" and isinstance(data, list):
        names = [str(e.get("name")) for e in data if isinstance(e, dict)]
        if not names:
            return "The folder is empty."
        return "The workspace contains: " + ", ".join(names) + "."
    return f"{call.name} returned: {_preview(json.dumps(data, ensure_ascii=False), 200)}"


def _listing_names(content: str) -> list[str] | None:
    envelope = _envelope(content)
    if envelope is None or not envelope.get("ok") or not isinstance(envelope.get("data"), list):
        return None
    return [str(e.get("name")) for e in envelope["data"] if isinstance(e, dict)]


def scripted_reply(messages: list[ChatMessage], tool_names: list[str]) -> LlmResponse:
    """The scripted assistant's next message for this conversation (deterministic, offline)."""
    reply = _Reply(messages, tool_names)
    user_index = _last_user_index(messages)
    if user_index is None:
        return reply.text(HELP_TEXT)
    intent = parse_intent(messages[user_index].content)
    tail = messages[user_index + 1 :]
    if not tail or tail[-1].role != "tool":
        # A new request (or a conversation that ends in a non-tool message): start the flow.
        if tail:  # the assistant already answered this user message
            return reply.text("Is there anything else I can do? " + HELP_TEXT)
        return _start(reply, intent)
    # After tool results: the batch is the last assistant message with calls and its answers.
    batch_index = next((i for i in range(len(tail) - 1, -1, -1) if tail[i].tool_calls), None)
    if batch_index is None:
        return reply.text(HELP_TEXT)
    batch = tail[batch_index]
    results = {m.tool_call_id: m.content for m in tail[batch_index + 1 :] if m.role == "tool"}
    calls = [c for c in batch.tool_calls or [] if c.id in results]
    if (
        intent.kind == "delete"
        and len(calls) == 1
        and calls[0].name == "list_dir"
        and (names := _listing_names(results[calls[0].id])) is not None
    ):
        target = intent.argument
        first = target.removeprefix("./").rstrip("/").split("/")[0]
        if first in names:
            return reply.call("delete_path", {"path": target})
        shown = ", ".join(names) if names else "nothing"
        return reply.text(f"I could not find {target} in the workspace (it contains: {shown}).")
    return reply.text("\n".join(_summarise(call, results[call.id]) for call in calls))


def ask_arguments(text: str) -> dict[str, Any]:
    """`QUESTION (options: A, B)` as the arguments of an `ask_user` call."""
    match = _CHOICES.search(text)
    if match is None:
        return {"question": text}
    options = [o.strip() for o in match.group("options").split(",") if o.strip()]
    arguments: dict[str, Any] = {"question": text[: match.start()].strip(), "options": options}
    if match.group("kind").lower() == "any of":
        arguments["multiple"] = True
    return arguments


def delegations(text: str) -> list[dict[str, Any]]:
    """`delegate (OPTIONS): TASK; delegate: TASK …` as the arguments of `delegate` calls: one
    per `; delegate:`, each with its `max_rounds N` and `tools: a, b` options when given."""
    found = []
    for part in _MORE_DELEGATIONS.split(text.strip()):
        match = _DELEGATE_TO.match(part)
        if match is None:
            continue
        task = match.group("task").strip().rstrip(";").strip()
        if not task:
            continue
        arguments: dict[str, Any] = {"task": task}
        for option in (match.group("options") or "").split(";"):
            name, _, value = option.strip().partition(" ")
            if name.lower() == "max_rounds" and value.strip().isdigit():
                arguments["max_rounds"] = int(value.strip())
            elif name.lower().rstrip(":") == "tools":
                arguments["tools"] = [t.strip() for t in value.split(",") if t.strip()]
        found.append(arguments)
    return found


def _start(reply: _Reply, intent: Intent) -> LlmResponse:
    if intent.kind == "delegate":
        asked = delegations(intent.argument)
        return reply.calls("delegate", asked) if asked else reply.text(HELP_TEXT)
    if intent.kind == "ask":
        return reply.call("ask_user", ask_arguments(intent.argument))
    if intent.kind == "run":
        return reply.call("run_command", {"command": intent.argument})
    if intent.kind == "delete":
        if "list_dir" in reply.tools:
            return reply.call("list_dir", {"path": "."})
        return reply.call("delete_path", {"path": intent.argument})
    if intent.kind == "read":
        return reply.call("read_file", {"path": intent.argument})
    if intent.kind == "list":
        return reply.call("list_dir", {"path": "."})
    return reply.text(HELP_TEXT)


# ---- Summaries (compaction) ----


def _first_line(text: str, limit: int = SUMMARY_LINE_CHARS) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return shorten(line, limit, ELLIPSIS, within=True)


def _summary_line(message: ChatMessage) -> str:
    if message.role == "tool":
        return f"- {message.name or 'tool'} result: {_first_line(message.content) or '(empty)'}"
    parts = [_first_line(message.content)] if message.content.strip() else []
    for call in message.tool_calls or []:
        parts.append(f"called {call.name} {_first_line(arguments_text(call.arguments), 80)}")
    return f"- {message.role}: {'; '.join(parts) or '(empty)'}"


def scripted_summary(messages: Sequence[ChatMessage], max_chars: int = SUMMARY_CHARS) -> str:
    """The scripted model's summary of `messages` for compaction: the first line of each, at
    most `max_chars` characters in all (deterministic, offline)."""
    lines = [f"Summary of {len(messages)} earlier message(s):"]
    used = len(lines[0])
    for index, message in enumerate(messages):
        line = _summary_line(message)
        if used + 1 + len(line) > max_chars:
            lines.append(f"- … and {len(messages) - index} more")
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)
