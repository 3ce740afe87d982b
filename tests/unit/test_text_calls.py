"""Tool calls a model wrote as text: read as calls when the whole reply is one (or several) in a
well-known form naming a tool the run offers; left as text, with a warning naming the likely
cause, when they look like a call but cannot run. First the reading itself, then the client
against the strict fake server over HTTP, streamed and not."""

from __future__ import annotations

import json

import httpx
import pytest

from activities.llm import OpenAIChatClient
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from workflows.model import ChatMessage, ToolSpec

OFFERED = ["list_dir", "read_file", "delete_path"]
SPECS = [ToolSpec(name=n, description=n, parameters={"type": "object"}) for n in OFFERED]
PROMPT = [ChatMessage.user("Please delete notes.txt")]

FENCED = '```json\n{"name": "delete_path", "arguments": {"path": "notes.txt"}}\n```'
TAGGED_TWO = (
    '<tool_call>\n{"name": "list_dir", "arguments": {"path": "."}}\n</tool_call>\n'
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
)


def read(content: str, mode: str = "parse"):
    from activities.text_calls import read_text_calls

    return read_text_calls(content, OFFERED, mode)  # type: ignore[arg-type]


def taken(content: str, mode: str = "parse") -> list[tuple[str, str, dict[str, object]]]:
    found = read(content, mode)
    assert found.warnings == [], found.warnings
    return [(c.id, c.name, json.loads(c.arguments)) for c in found.calls]


# ---------------------------------------------------------------- the forms and shapes


CALL_FORMS = {
    "fenced-json": FENCED,
    "fenced-with-space": f"\n  {FENCED}  \n",
    "fenced-one-line": '```json {"name": "delete_path", "arguments": {"path": "notes.txt"}}```',
    "fenced-tool-call": '```tool_call\n{"name": "delete_path", "arguments": {"path": "notes.txt"}}'
    "\n```",
    "hermes": '<tool_call>\n{"name": "delete_path", "arguments": {"path": "notes.txt"}}\n'
    "</tool_call>",
    "hermes-unclosed": '<tool_call>{"name": "delete_path", "arguments": {"path": "notes.txt"}}',
    "hermes-fenced-inside": '<tool_call>\n```json\n{"name": "delete_path", "arguments": {"path":'
    ' "notes.txt"}}\n```\n</tool_call>',
    "template-braces-outer": '<tool_call>\n{{"name": "delete_path", "arguments": {"path":'
    ' "notes.txt"}}}\n</tool_call>',
    "mistral-marker": '[TOOL_CALLS][{"name": "delete_path", "arguments": {"path": "notes.txt"}}]',
    "llama-python-tag": '<|python_tag|>{"name": "delete_path", "parameters": {"path":'
    ' "notes.txt"}}<|eom_id|>',
    "template-braces-all": '<tool_call>\n{{"name": "delete_path", "arguments": {{"path":'
    ' "notes.txt"}}}}\n</tool_call>',
}
BARE_FORMS = {
    "bare-object": '{"name": "delete_path", "arguments": {"path": "notes.txt"}}',
    "arguments-as-json-text": '{"name": "delete_path", "arguments": "{\\"path\\": \\"notes.txt\\"}"}',
    "llama-parameters": '{"name": "delete_path", "parameters": {"path": "notes.txt"}}',
    "function-wrapper": '{"type": "function", "function": {"name": "delete_path", "arguments":'
    ' {"path": "notes.txt"}}}',
    "fenced-untagged": '```\n{"name": "delete_path", "arguments": {"path": "notes.txt"}}\n```',
}


@pytest.mark.parametrize("content", CALL_FORMS.values(), ids=CALL_FORMS.keys())
def test_one_call_in_each_call_form(content):
    assert taken(content) == [("call_text_0", "delete_path", {"path": "notes.txt"})]
    assert read(content).content == ""
    assert [c.from_text for c in read(content).calls] == [True]


@pytest.mark.parametrize("content", BARE_FORMS.values(), ids=BARE_FORMS.keys())
def test_a_bare_json_call_is_a_call_only_in_bare_mode(content):
    """A reply that is only a JSON object (say, the user asked to see a file that holds one) is
    no call by default: it stays the answer, with a warning saying how to read it as one."""
    found = read(content)
    assert found.calls == [] and found.content == content
    [warning] = found.warnings
    assert "`delete_path`" in warning and "LLM_TEXT_TOOL_CALLS=bare" in warning
    assert taken(content, "bare") == [("call_text_0", "delete_path", {"path": "notes.txt"})]
    assert read(content, "bare").content == ""


def test_several_calls_tagged_listed_or_fenced():
    expected = [
        ("call_text_0", "list_dir", {"path": "."}),
        ("call_text_1", "read_file", {"path": "a.txt"}),
    ]
    listed = json.dumps(
        [
            {"name": "list_dir", "arguments": {"path": "."}},
            {"function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}},
        ]
    )
    two_blocks = (
        '```json\n{"name": "list_dir", "arguments": {"path": "."}}\n```\n\n'
        '```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```'
    )
    assert taken(TAGGED_TWO) == expected
    assert taken(f"```json\n{listed}\n```") == expected
    assert taken(listed, "bare") == expected
    assert taken(two_blocks, "bare") == expected
    for loose in (listed, two_blocks):  # a bare list, two blocks: no call's syntax
        assert read(loose).calls == [] and len(read(loose).warnings) == 1


def test_a_sentence_before_tool_call_markers_stays_as_the_content():
    found = read(f"I will look first.\n{TAGGED_TWO}")
    assert [c.name for c in found.calls] == ["list_dir", "read_file"]
    assert found.content == "I will look first."


def test_a_call_with_no_arguments_to_an_offered_tool():
    assert taken('<tool_call>{"name": "list_dir"}</tool_call>') == [("call_text_0", "list_dir", {})]
    assert taken('{"name": "list_dir"}', "bare") == [("call_text_0", "list_dir", {})]
    assert taken('{"name": "list_dir", "arguments": null}', "bare") == [
        ("call_text_0", "list_dir", {})
    ]


# ---------------------------------------------------------------- what is not a call


@pytest.mark.parametrize(
    "content",
    [
        "The file was deleted.",
        'Here is an example of the format:\n```json\n{"path": "notes.txt"}\n```\nThat is all.',
        '```json\n{"files": ["a.txt", "b.txt"], "count": 2}\n```',
        '{"name": "Alice", "age": 31}',
        '{"name": "Alice"}',
        "[1, 2, 3]",
        '```python\nprint("delete_path")\n```',
        "{ this is not json",
        "",
    ],
    ids=[
        "prose",
        "json-example-among-text",
        "json-data-answer",
        "object-with-other-keys",
        "name-only-unknown",
        "array-of-numbers",
        "python-block",
        "braces",
        "empty",
    ],
)
def test_answers_that_are_no_call_stay_text_without_a_warning(content):
    found = read(content)
    assert found.calls == [] and found.warnings == []
    assert found.content == content


# ---------------------------------------------------------------- looks like a call, cannot run


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ('```json\n{"name": "format_disk", "arguments": {}}\n```', "`format_disk`, a tool this"),
        (
            '<tool_call>{"name": "delete_path", "arguments": ["notes.txt"]}</tool_call>',
            "are not a JSON object",
        ),
        (
            '<tool_call>{"name": "delete_path", "arguments": "notes.txt"}</tool_call>',
            "are not a JSON object",
        ),
        (
            "<tool_call>\n{'name': 'delete_path'}\n</tool_call>",
            "broken JSON inside the <tool_call>",
        ),
        ('```json\n{"name": "delete_path", "arguments": {"path": \n```', "broken JSON"),
        ('```json\n{"name": "delete_path", "arguments": {"pa', "broken JSON"),
        ("<tool_call>[1, 2]</tool_call>", "hold something that is no call"),
        (
            '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call> and then I stop.',
            "text after its <tool_call> markers",
        ),
    ],
    ids=[
        "unknown-tool",
        "arguments-a-list",
        "arguments-text-no-json",
        "hermes-single-quotes",
        "fenced-broken",
        "fenced-cut-off",
        "hermes-not-a-call",
        "text-after-markers",
    ],
)
def test_what_looks_like_a_call_but_cannot_run_is_a_warning(content, cause):
    found = read(content)
    assert found.calls == [] and found.content == content
    assert len(found.warnings) == 1
    warning = found.warnings[0]
    assert cause in warning, warning
    assert "nothing ran" in warning
    assert "chat template" in warning and "--jinja" in warning


def test_one_bad_call_among_good_ones_takes_none():
    listed = json.dumps(
        [
            {"name": "list_dir", "arguments": {"path": "."}},
            {"name": "rm_rf", "arguments": {"path": "/"}},
        ]
    )
    found = read(listed, "bare")
    assert found.calls == []
    assert len(found.warnings) == 1 and "`rm_rf`" in found.warnings[0]
    assert read(listed).warnings == []  # not a call's syntax: just an answer


def test_a_call_to_an_offered_tool_among_other_text_is_a_warning_not_a_call():
    content = f"I think this is what you want:\n{FENCED}\nShall I go on?"
    found = read(content)
    assert found.calls == [] and found.content == content
    assert len(found.warnings) == 1 and "`delete_path`" in found.warnings[0]
    assert "among other text" in found.warnings[0]


def test_warn_mode_warns_and_takes_nothing_off_mode_does_neither():
    warned = read(FENCED, "warn")
    assert warned.calls == [] and warned.content == FENCED
    assert len(warned.warnings) == 1
    assert "LLM_TEXT_TOOL_CALLS=warn" in warned.warnings[0]
    assert "`delete_path`" in warned.warnings[0]
    off = read(FENCED, "off")
    assert off.calls == [] and off.warnings == [] and off.content == FENCED
    assert read('{"name": "format_disk", "arguments": {}}', "off").warnings == []


def test_a_huge_name_is_shown_bounded():
    content = json.dumps({"name": "x" * 5_000, "arguments": {}})
    (warning,) = read(content, "bare").warnings
    assert len(warning) < 600


# ---------------------------------------------------------------- the client over HTTP


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


def client_for(fake: FakeOpenAIServer, http: httpx.AsyncClient, **kwargs) -> OpenAIChatClient:
    return OpenAIChatClient(http, fake.base_url, None, "fake-model", **kwargs)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_a_fenced_call_in_the_reply_becomes_the_call(fake, http, stream):
    fake.enqueue(text(FENCED))
    pieces: list[str] = []
    reply = await client_for(fake, http, stream=stream).complete(
        PROMPT, SPECS, on_text=pieces.append
    )
    calls = reply.message.tool_calls or []
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_text_0", "delete_path", {"path": "notes.txt"})
    ]
    assert reply.message.content == ""
    assert reply.calls_from_text is True and reply.warnings == []
    assert "".join(pieces) == FENCED  # the live view showed what the model wrote


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_several_tagged_calls_in_the_reply(fake, http, stream):
    fake.enqueue(text(f"Looking.\n{TAGGED_TWO}"))
    reply = await client_for(fake, http, stream=stream).complete(PROMPT, SPECS)
    assert [c.name for c in reply.message.tool_calls or []] == ["list_dir", "read_file"]
    assert reply.message.content == "Looking."
    assert reply.calls_from_text is True


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_a_call_to_a_tool_the_run_does_not_offer_is_a_warning(fake, http, stream):
    fake.enqueue(text(FENCED))
    only_reading = [s for s in SPECS if s.name != "delete_path"]
    reply = await client_for(fake, http, stream=stream).complete(PROMPT, only_reading)
    assert reply.message.tool_calls is None
    assert reply.message.content == FENCED and reply.calls_from_text is False
    assert len(reply.warnings) == 1 and "--jinja" in reply.warnings[0]


async def test_warn_and_off_over_http(fake, http):
    fake.enqueue(text(FENCED), text(FENCED))
    warned = await client_for(fake, http, text_tool_calls="warn").complete(PROMPT, SPECS)
    assert warned.message.tool_calls is None and len(warned.warnings) == 1
    off = await client_for(fake, http, text_tool_calls="off").complete(PROMPT, SPECS)
    assert off.message.tool_calls is None and off.warnings == []
    assert off.message.content == FENCED


async def test_a_final_answer_with_a_json_example_stays_an_answer(fake, http):
    answer = 'The settings file looks like this:\n```json\n{"path": "notes.txt"}\n```\nDone.'
    fake.enqueue(text(answer))
    reply = await client_for(fake, http).complete(PROMPT, SPECS)
    assert reply.message.content == answer
    assert reply.message.tool_calls is None and reply.warnings == []
    assert reply.calls_from_text is False


async def test_real_tool_calls_are_left_as_they_are(fake, http):
    fake.enqueue(tool_calls(("call_1", "list_dir", '{"path": "."}'), content=FENCED))
    reply = await client_for(fake, http).complete(PROMPT, SPECS)
    assert [c.id for c in reply.message.tool_calls or []] == ["call_1"]
    assert reply.message.content == FENCED and reply.calls_from_text is False
