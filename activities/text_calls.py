"""Tool calls a model wrote as text, read as the calls they are.

Small local models, and servers whose chat template does not match the model, often put a call
in the reply's text instead of `tool_calls`. With `LLM_TEXT_TOOL_CALLS=parse` (the default) such
a reply is taken as its calls only when it is written in a call's own syntax: Hermes/Qwen
`<tool_call>{…}</tool_call>` (one or several, after an optional sentence), another template's
call marker followed by the call (Mistral's `[TOOL_CALLS]`, Llama 3.1's `<|python_tag|>`), or
one fenced ```` ```json ```` block that is the whole reply. A reply that is only a bare JSON
object (or an unlabelled or second code block) is what a model answers when asked to *show* some
JSON, so it is taken as a call only with `LLM_TEXT_TOOL_CALLS=bare`; in `parse` mode it stays
text, with a warning when it names an offered tool. Taken or not, the calls must name tools the
run offers, with object arguments; they then pass the same gate as any other, marked
`from_text`. Text that looks like a call but is not one that can run (an unknown tool, arguments
that are not an object, broken JSON inside the markers) is left as text, with a warning naming
the likely cause. A final answer that merely shows a JSON example among other text is not a call.

Shapes read: `{"name", "arguments"}` (or `"parameters"`, as Llama models write it) and
`{"function": {"name", "arguments"}}`, alone or in a list; arguments an object or the JSON text
of one. Inside call markers, the doubled braces of a chat template's own example
(`{{"name": …}}`, copied by the model) are read as the single braces they stand for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from activities.llm_reply import strict_json
from runtime.modes import TextCallMode
from workflows.model import ToolCall
from workflows.shown import ELLIPSIS, shorten

ID_PREFIX = "call_text_"
MAX_WARNINGS = 3
NAME_CHARS = 60

LIKELY_CAUSE = (
    "A call written as text means the server did not read it as a tool call: its chat template's"
    " call markers probably do not match what the model writes (llama.cpp needs --jinja and a"
    " template whose call markers match the model's)."
)

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
PREFIX_MARKERS = ("[TOOL_CALLS]", "<|python_tag|>")
"""Call markers of other chat templates, each followed by the call's JSON: Mistral's, and Llama
3.1's (whose call ends at `<|eom_id|>` or `<|eot_id|>` when the server leaves that in)."""
_END_TOKENS = ("<|eom_id|>", "<|eot_id|>")
_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z_-]*)[ \t]*\r?\n?(?P<body>.*?)```", re.DOTALL)
_UNCLOSED_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z_-]*)[ \t]*\r?\n?(?P<body>.*)", re.DOTALL)
_JSON_FENCES = {"json", "", "tool_call", "tool_calls"}
_CALL_FENCES = {"json", "tool_call", "tool_calls"}
"""The labels of the one code block that is a call form in `parse` mode (an unlabelled block is
read only in `bare` mode)."""
_CALL_KEYS = {"name", "arguments", "parameters", "type", "id"}
_WRAPPER_KEYS = {"function", "type", "id"}
_LOOKS_LIKE_A_CALL = re.compile(r'"(?:name|function)"\s*:')


@dataclass(frozen=True)
class TextCalls:
    """What a reply's text held: the calls taken (none in `warn` and `off` mode, or when any
    of them cannot run), the text to keep, and what the worker noticed."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Found:
    """Call-shaped items read from the text, and the problems that stop them being taken."""

    form: str
    prose: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_text_calls(
    content: str, offered: Collection[str], mode: TextCallMode = "parse"
) -> TextCalls:
    """The tool calls written as the whole of `content` (see the module's docstring)."""
    if mode == "off" or not content.strip():
        return TextCalls(content=content)
    found = _whole_text_calls(content.strip(), offered, bare=mode != "parse")
    if found is None:
        return TextCalls(content=content, warnings=_not_a_call_form(content, offered))
    if found.problems:
        return TextCalls(content=content, warnings=_warnings(found.problems))
    if not found.calls:
        return TextCalls(content=content)
    if mode == "warn":
        names = ", ".join(_shown(name) for name, _ in found.calls)
        problem = (
            f"the reply's text holds {_count(len(found.calls))} written as {found.form} ({names})"
            " and LLM_TEXT_TOOL_CALLS=warn"
        )
        return TextCalls(content=content, warnings=_warnings([problem]))
    calls = [
        ToolCall(
            id=f"{ID_PREFIX}{index}",
            name=name,
            arguments=json.dumps(arguments, ensure_ascii=False),
            from_text=True,
        )
        for index, (name, arguments) in enumerate(found.calls)
    ]
    return TextCalls(calls=calls, content=found.prose)


# ---- The forms ----


def _whole_text_calls(text: str, offered: Collection[str], *, bare: bool) -> _Found | None:
    """The calls when the whole text is in one of the forms, else None (it is no call).
    `bare`: a bare JSON object, an unlabelled block and several blocks are forms too."""
    if OPEN_TAG in text:
        return _tagged(text, offered)
    for marker in PREFIX_MARKERS:
        if marker in text:
            return _prefixed(text, marker, offered)
    blocks = _fenced_blocks(text)
    if blocks is not None and not bare and not _one_call_block(text):
        return None
    if blocks is not None:
        found = _Found(form="a fenced json block")
        for block in blocks:
            _read_payload(block, offered, found, marked=False)
        return found if found.calls or found.problems else None
    if bare and text[:1] in "{[":
        found = _Found(form="a bare JSON object")
        _read_payload(text, offered, found, marked=False)
        return found if found.calls or found.problems else None
    return None


def _tagged(text: str, offered: Collection[str]) -> _Found:
    """Hermes/Qwen `<tool_call>…</tool_call>` blocks, after an optional sentence. The last
    closing tag may be missing (a server that stops on it)."""
    start = text.find(OPEN_TAG)
    found = _Found(form="<tool_call> markers", prose=text[:start].strip())
    rest = text[start:]
    while rest:
        if not rest.startswith(OPEN_TAG):
            found.problems.append("the reply has text after its <tool_call> markers")
            return found
        rest = rest[len(OPEN_TAG) :]
        end = rest.find(CLOSE_TAG)
        body, rest = (rest, "") if end < 0 else (rest[:end], rest[end + len(CLOSE_TAG) :].lstrip())
        inner = _fenced_blocks(body.strip())
        _read_payload(inner[0] if inner and len(inner) == 1 else body, offered, found, marked=True)
    if not found.calls and not found.problems:
        found.problems.append("the reply's <tool_call> markers hold no call")
    return found


def _prefixed(text: str, marker: str, offered: Collection[str]) -> _Found:
    """A call marker of another template (`[TOOL_CALLS]`, `<|python_tag|>`) followed by the
    call's JSON (an object or a list), after an optional sentence."""
    start = text.find(marker)
    found = _Found(form=f"{marker} markers", prose=text[:start].strip())
    body = text[start + len(marker) :].strip()
    for token in _END_TOKENS:
        body = body.removesuffix(token).rstrip()
    _read_payload(body, offered, found, marked=True)
    return found


def _fenced_blocks(text: str) -> list[str] | None:
    """The bodies of the JSON code blocks the text consists of, or None when it has anything
    else (prose, a block of another language)."""
    blocks: list[str] = []
    position = 0
    for match in _FENCE.finditer(text):
        if text[position : match.start()].strip():
            return None
        if match["lang"].lower() not in _JSON_FENCES:
            return None
        blocks.append(match["body"])
        position = match.end()
    rest = text[position:].strip()
    unclosed = _UNCLOSED_FENCE.fullmatch(rest) if rest.startswith("```") else None
    if unclosed is not None and unclosed["lang"].lower() in _JSON_FENCES:
        blocks.append(unclosed["body"])  # a reply cut off inside its block
    elif rest:
        return None
    return blocks or None


def _one_call_block(text: str) -> bool:
    """Whether the text is one code block labelled as JSON (or as a tool call)."""
    matches = list(_FENCE.finditer(text))
    if len(matches) > 1:
        return False
    if matches:
        return matches[0]["lang"].lower() in _CALL_FENCES
    unclosed = _UNCLOSED_FENCE.fullmatch(text)
    return unclosed is not None and unclosed["lang"].lower() in _CALL_FENCES


def _not_a_call_form(content: str, offered: Collection[str]) -> list[str]:
    """In `parse` mode, the warning for a reply that would be calls to offered tools in `bare`
    mode (a bare JSON object, an unlabelled or second block): left as text, it may still have
    been meant as a call. Else the warnings for calls shown among other text."""
    loose = _whole_text_calls(content.strip(), offered, bare=True)
    if loose is None or not loose.calls or loose.problems:
        return _calls_amid_text(content, offered)
    names = ", ".join(_shown(name) for name, _ in loose.calls)
    return _warnings(
        [
            f"the reply is only {loose.form} shaped as {_count(len(loose.calls))} ({names}),"
            " which is no call's syntax (LLM_TEXT_TOOL_CALLS=bare reads it as one)"
        ]
    )


def _calls_amid_text(content: str, offered: Collection[str]) -> list[str]:
    """A warning for each JSON block among other text that is a call to an offered tool: it is
    not taken (an answer may show an example), but the model may have meant it."""
    names: list[str] = []
    for match in _FENCE.finditer(content):
        if match["lang"].lower() not in _JSON_FENCES:
            continue
        found = _Found(form="")
        _read_payload(match["body"], offered, found, marked=False)
        names += [name for name, _ in found.calls]
    if not names:
        return []
    shown = ", ".join(_shown(name) for name in names)
    return _warnings([f"the reply's text shows a call to {shown} in a JSON block among other text"])


# ---- One payload ----


def _read_payload(text: str, offered: Collection[str], found: _Found, *, marked: bool) -> None:
    """Add the calls of one JSON payload to `found`. `marked`: inside call markers, so anything
    that is not a call is a problem; otherwise a payload that is not call-shaped is just JSON."""
    try:
        value = _marked_json(text.strip()) if marked else strict_json(text.strip())
    except ValueError:
        if marked or _LOOKS_LIKE_A_CALL.search(text):
            where = "inside the <tool_call> markers" if marked else "in what looks like a call"
            found.problems.append(f"the reply's text has broken JSON {where}")
        return
    items = value if isinstance(value, list) and value else [value]
    shaped = [_call_shape(item, offered) for item in items]
    if any(shape is None for shape in shaped):
        if marked:
            found.problems.append("the reply's <tool_call> markers hold something that is no call")
        return
    for shape in shaped:
        assert shape is not None
        name, arguments = shape
        if name not in offered:
            found.problems.append(
                f"the reply's text holds a call to {_shown(name)}, a tool this run does not offer"
            )
            continue
        parsed = _object_arguments(arguments)
        if parsed is None:
            found.problems.append(
                f"the reply's text holds a call to {_shown(name)} whose arguments are not a JSON"
                " object"
            )
            continue
        found.calls.append((name, parsed))


def _marked_json(text: str) -> Any:
    """The JSON inside call markers. A chat template shows the call's shape as
    `{{"name": …, "arguments": …}}` (its braces doubled to escape them), and models copy it: text
    that is no JSON as it is, but is once its doubled braces are single, is read so."""
    try:
        return strict_json(text)
    except ValueError:
        if "{{" not in text:
            raise
    if text.startswith("{{") and text.endswith("}}"):
        try:
            return strict_json(text[1:-1])  # only the outer braces doubled
        except ValueError:
            pass
    return strict_json(text.replace("{{", "{").replace("}}", "}"))


def _call_shape(item: Any, offered: Collection[str]) -> tuple[str, Any] | None:
    """(name, arguments) of an object shaped like a call, else None."""
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if isinstance(function, dict) and set(item) <= _WRAPPER_KEYS:
        item = function
    name = item.get("name")
    if not isinstance(name, str) or not name or not set(item) <= _CALL_KEYS:
        return None
    if "arguments" in item:
        return name, item["arguments"]
    if "parameters" in item:
        return name, item["parameters"]
    # `{"name": "x"}` alone is a call only to a tool the run has: as an answer it is just data.
    return (name, {}) if name in offered else None


def _object_arguments(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, str):
        try:
            arguments = strict_json(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if arguments is None:
        return {}
    return arguments if isinstance(arguments, dict) else None


# ---- Words ----


def _shown(name: str) -> str:
    return f"`{shorten(name, NAME_CHARS, ELLIPSIS, within=True)}`"


def _count(n: int) -> str:
    return "a tool call" if n == 1 else f"{n} tool calls"


def _warnings(problems: list[str]) -> list[str]:
    unique = list(dict.fromkeys(problems))[:MAX_WARNINGS]
    return [f"{problem}: it was left as text and nothing ran. {LIKELY_CAUSE}" for problem in unique]
