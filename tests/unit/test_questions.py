"""The `ask_user` tool's rules (`workflows.people.ask_user`): what a call asks, which answers a question
takes, the result the model reads; the scripted model's question, and the notification."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from activities.notify_message import json_body, slack_text
from activities.scripted import ask_arguments, scripted_reply
from workflows.contract.arguments import arguments_digest
from workflows.model import ChatMessage, NotifyRequest, ToolCall
from workflows.people.ask_user import (
    ASK_USER,
    MAX_ANSWER_CHARS,
    Question,
    Refused,
    answer_content,
    check_answer,
    parse_question,
)
from workflows.people.signatures import answer_decision


def asked(arguments: object) -> Question | str:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return parse_question(ToolCall(id="call_1", name=ASK_USER, arguments=text))


def test_a_good_question_with_and_without_options() -> None:
    why = {"question": " Why? "}
    assert asked(why) == Question("call_1", "Why?", arguments_sha256=arguments_digest(why))
    several = {"question": "Q", "options": ["a", " b "], "multiple": True}
    assert asked(several) == Question(
        "call_1", "Q", ("a", "b"), True, arguments_digest(json.dumps(several))
    )


def test_an_answer_is_signed_as_the_hash_of_its_text() -> None:
    assert answer_decision("tmp") == "answer:" + hashlib.sha256(b"tmp").hexdigest()
    assert answer_decision(["a", "b"]) == "answer:" + hashlib.sha256(b'["a","b"]').hexdigest()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("not json", "one JSON object"),
        ([1], "one JSON object"),
        ({}, "'question' must be a non-empty string"),
        ({"question": "  "}, "'question' must be a non-empty string"),
        ({"question": "Q", "options": "a"}, "'options' must be a list of strings"),
        ({"question": "Q", "options": [1]}, "'options' must be a list of strings"),
        ({"question": "Q", "options": []}, "1 to 20"),
        ({"question": "Q", "options": ["a", "a"]}, "must not repeat"),
        ({"question": "Q", "options": [""]}, "non-empty string"),
        ({"question": "Q", "multiple": True}, "'multiple' needs 'options'"),
        ({"question": "Q", "multiple": "yes"}, "true or false"),
        ({"question": "Q", "urgent": True}, "unknown argument 'urgent'"),
        ({"question": "Q" * 2_001}, "at most 2000"),
    ],
)
def test_arguments_that_are_not_a_question(arguments: object, problem: str) -> None:
    found = asked(arguments)
    assert isinstance(found, str) and problem in found


def test_answers_a_question_takes_and_refuses() -> None:
    free = Question("c", "Name?")
    assert check_answer(free, "  Ann ") == "Ann"
    one = Question("c", "Q", ("tmp", "logs"))
    assert check_answer(one, "logs") == "logs"
    several = Question("c", "Q", ("a", "b", "c"), True)
    assert check_answer(several, ["c", "a", "c"]) == ["c", "a"]
    for question, answer, problem in [
        (free, "", "non-empty text"),
        (free, ["x"], "non-empty text"),
        (free, "x" * (MAX_ANSWER_CHARS + 1), f"at most {MAX_ANSWER_CHARS}"),
        (one, "home", "'home' is not one of the options: tmp, logs"),
        (one, ["tmp"], "takes one of its options as a text"),
        (several, "a", "takes a list of its options"),
        (several, ["a", "z"], "'z' is not one of the options"),
        (several, [], "choose at least one"),
    ]:
        with pytest.raises(Refused, match=problem.replace("(", r"\(")):
            check_answer(question, answer)


def test_the_model_reads_the_answer_in_the_envelope() -> None:
    assert json.loads(answer_content(["a", "b"])) == {
        "ok": True,
        "error": None,
        "data": {"answer": ["a", "b"]},
    }


def test_the_scripted_model_asks_when_the_tool_is_offered() -> None:
    assert ask_arguments("Which? (any of: a, b)") == {
        "question": "Which?",
        "options": ["a", "b"],
        "multiple": True,
    }
    reply = scripted_reply([ChatMessage.user("ask me: Why? (options: x, y)")], [ASK_USER])
    (call,) = reply.message.tool_calls or []
    assert call.name == ASK_USER
    assert json.loads(call.arguments) == {"question": "Why?", "options": ["x", "y"]}
    offline = scripted_reply([ChatMessage.user("ask me: Why?")], ["list_dir"])
    assert offline.message.tool_calls is None


def test_a_question_waiting_is_notified_with_the_question() -> None:
    request = NotifyRequest(
        event="question_waiting",
        workflow_id="W",
        run_id="R",
        call_id="call_1",
        tool=ASK_USER,
        arguments={"question": "Which <one>?", "options": ["a"], "multiple": False},
        waiting_since=datetime(2026, 1, 2, tzinfo=UTC),
    )
    body = json_body(request, link=None, include_content=True)
    assert body["event"] == "question_waiting" and body["call_id"] == "call_1"
    assert body["arguments"]["question"] == "Which <one>?"
    line = slack_text(request, link=None, include_content=True)
    assert line.startswith(":question: A question waits for an answer in run `W`")
    assert line.endswith("Which &lt;one&gt;?")
    assert "Which" not in slack_text(request, link=None, include_content=False)
