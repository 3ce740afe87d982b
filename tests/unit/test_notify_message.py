"""What a notification says: the JSON body's fields, the arguments only when allowed and bounded,
and the one Slack line (the tool, the run with its link, the call) in which nothing the run holds
can break the formatting or hide itself."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from activities.notify_message import (
    ARGUMENTS_JSON_CHARS,
    SLACK_ARGUMENTS_CHARS,
    json_body,
    run_link,
    slack_text,
    timestamp,
)
from workflows.contract.arguments import arguments_digest
from workflows.model import NotifyRequest

SINCE = datetime(2026, 3, 4, 5, 6, 7, 890_000, tzinfo=UTC)


def waiting(**fields: object) -> NotifyRequest:
    values: dict[str, object] = {
        "event": "approval_waiting",
        "workflow_id": "agent-42",
        "run_id": "run-1",
        "call_id": "call_2",
        "tool": "delete_path",
        "arguments": '{"path": "logs"}',
        "waiting_since": SINCE,
    }
    values.update(fields)
    return NotifyRequest.model_validate(values)


def test_the_json_body_of_a_waiting_call_has_every_field_in_order():
    link = run_link("http://inbox.local:8080", "agent-42")
    body = json_body(waiting(), link=link, include_content=True)
    assert list(body) == [
        "event",
        "workflow_id",
        "run_id",
        "call_id",
        "tool",
        "arguments",
        "arguments_sha256",
        "waiting_since",
        "url",
    ]
    assert body == {
        "event": "approval_waiting",
        "workflow_id": "agent-42",
        "run_id": "run-1",
        "call_id": "call_2",
        "tool": "delete_path",
        "arguments": {"path": "logs"},
        "arguments_sha256": arguments_digest({"path": "logs"}),
        "waiting_since": "2026-03-04T05:06:07.890000Z",
        "url": "http://inbox.local:8080/runs/agent-42",
    }


def test_without_content_the_arguments_are_left_out_and_without_an_inbox_the_url_is_null():
    body = json_body(waiting(), link=None, include_content=False)
    assert "arguments" not in body and "arguments_sha256" not in body  # a digest of content
    assert body["url"] is None
    assert body["call_id"] == "call_2"


def test_arguments_that_are_not_json_go_as_the_string_they_are():
    body = json_body(waiting(arguments='{"path": "lo'), link=None, include_content=True)
    assert body["arguments"] == '{"path": "lo'


def test_big_arguments_are_cut_and_say_so():
    big = {"content": "x" * (ARGUMENTS_JSON_CHARS * 3)}
    body = json_body(waiting(arguments=big), link=None, include_content=True)
    assert body["arguments_truncated"] is True
    assert isinstance(body["arguments"], str)
    assert len(body["arguments"]) == ARGUMENTS_JSON_CHARS + 1
    assert body["arguments"].startswith('{"content": "xxx')
    assert len(json.dumps(body)) < ARGUMENTS_JSON_CHARS + 500


def test_a_reminder_has_the_same_fields():
    body = json_body(waiting(event="approval_reminder"), link=None, include_content=True)
    assert body["event"] == "approval_reminder"
    assert body["waiting_since"] == "2026-03-04T05:06:07.890000Z"


def test_run_finished_says_how_and_the_error_only_with_content():
    request = NotifyRequest(
        event="run_finished",
        workflow_id="agent-42",
        run_id="run-1",
        finish_reason="error",
        error="the model server answered 500",
    )
    body = json_body(request, link="http://i/runs/agent-42", include_content=True)
    assert body == {
        "event": "run_finished",
        "workflow_id": "agent-42",
        "run_id": "run-1",
        "finish_reason": "error",
        "error": "the model server answered 500",
        "url": "http://i/runs/agent-42",
    }
    assert "error" not in json_body(request, link=None, include_content=False)


def test_the_link_encodes_the_workflow_id():
    assert run_link("https://inbox.example/agent/", "a b/c?d") == (
        "https://inbox.example/agent/runs/a%20b%2Fc%3Fd"
    )
    assert run_link(None, "agent-42") is None


def test_times_are_utc_with_z():
    paris = timezone(timedelta(hours=1))
    assert timestamp(datetime(2026, 1, 1, 13, 0, tzinfo=paris)) == "2026-01-01T12:00:00Z"
    assert timestamp(datetime(2026, 1, 1, 12, 0)) == "2026-01-01T12:00:00Z"
    assert timestamp(None) is None


def test_the_slack_line_names_the_tool_the_run_with_its_link_and_the_call():
    text = slack_text(waiting(), link="http://inbox.local/runs/agent-42", include_content=True)
    assert text == (
        ":hourglass_flowing_sand: `delete_path` is waiting for approval in run"
        " <http://inbox.local/runs/agent-42|agent-42> (call `call_2`, run id `run-1`,"
        f' sha256 `{arguments_digest({"path": "logs"})}`): `{{"path": "logs"}}`'
    )


def test_the_slack_line_without_content_or_inbox():
    text = slack_text(waiting(), link=None, include_content=False)
    assert text == (
        ":hourglass_flowing_sand: `delete_path` is waiting for approval in run `agent-42`"
        " (call `call_2`, run id `run-1`)"
    )


def test_a_slack_reminder_says_since_when():
    text = slack_text(waiting(event="approval_reminder"), link=None, include_content=False)
    assert text.startswith(
        ":alarm_clock: Reminder: `delete_path` has been waiting for approval since"
        " 2026-03-04 05:06 UTC in run `agent-42`"
    )


def test_nothing_in_the_arguments_breaks_the_slack_line_or_hides_itself():
    hostile = {"command": "echo `id` <!channel> & \x1b[31mred\n\u202eevil"}
    text = slack_text(waiting(arguments=hostile), link=None, include_content=True)
    assert "\n" not in text
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\u001b[31mred\\n\\u202eevil" in text  # JSON's escapes, and ours for the rest
    assert "<!channel>" not in text  # Slack would ping the channel
    assert "&lt;!channel&gt; &amp;" in text
    # the only backticks are the spans' own: the tool, the run, the call, the run id, the
    # digest, the arguments
    assert text.count("`") == 12
    assert "ˋidˋ" in text


def test_slack_arguments_are_bounded():
    big = {"content": "y" * 10_000}
    text = slack_text(waiting(arguments=big), link=None, include_content=True)
    arguments = text.rsplit(": `", 1)[1]
    assert len(arguments) <= SLACK_ARGUMENTS_CHARS + 1
    assert arguments.endswith("…`")


def test_a_workflow_id_cannot_forge_a_slack_link():
    request = waiting(workflow_id="x|<https://evil.example|click>")
    text = slack_text(
        request, link=run_link("http://inbox", request.workflow_id), include_content=False
    )
    assert "<https://evil.example" not in text
    assert text.count("<") == 1 and text.count(">") == 1
    assert "<http://inbox/runs/x%7C%3Chttps%3A%2F%2Fevil.example%7Cclick%3E|" in text
    # nor an inbox address with Slack's separators in it
    odd = slack_text(waiting(), link="http://inbox/a|b>c/runs/agent-42", include_content=False)
    assert "<http://inbox/a%7Cb%3Ec/runs/agent-42|agent-42>" in odd


def test_slack_says_how_a_run_ended():
    def finished(reason: str, error: str | None = None, content: bool = True) -> str:
        request = NotifyRequest.model_validate(
            {
                "event": "run_finished",
                "workflow_id": "agent-42",
                "run_id": "r",
                "finish_reason": reason,
                "error": error,
            }
        )
        return slack_text(request, link=None, include_content=content)

    assert finished("stop") == "Run `agent-42` finished"
    assert finished("cancelled") == "Run `agent-42` was cancelled"
    assert finished("max_rounds") == "Run `agent-42` stopped at its round limit"
    assert finished("error", "boom <here>") == "Run `agent-42` failed: boom &lt;here&gt;"
    assert finished("error", "boom", content=False) == "Run `agent-42` failed"


def test_a_notification_makes_text_visible_exactly_as_the_terminal_does():
    """Private-use, unassigned and bidirectional characters, and escapes, never reach a Slack
    channel raw: each is written as the terminal and the web write it."""
    from starter.render import visible as terminal_visible

    hidden = "rm \ue000x\u0378 \u202eevil \x1b[2J"
    text = slack_text(waiting(arguments={"command": hidden}), link=None, include_content=True)
    shown = terminal_visible(hidden)
    assert shown == "rm \\ue000x\\u0378 \\u202eevil \\u001b[2J"
    assert shown in text
    assert not any(c in text for c in "\ue000\u0378\u202e\x1b")
    finished = NotifyRequest(
        event="run_finished",
        workflow_id="agent-\ue000",
        run_id="run-1",
        finish_reason="error",
        error=f"boom {hidden}",
    )
    line = slack_text(finished, link=None, include_content=True)
    assert line == f"Run `agent-\\ue000` failed: boom {shown}"


def test_a_run_at_its_token_budget_says_used_of_limit():
    request = NotifyRequest(
        event="budget_exhausted",
        workflow_id="agent-42",
        run_id="run-1",
        waiting_since=datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
        used=1_200,
        limit=1_000,
    )
    assert json_body(request, link=None, include_content=False) == {
        "event": "budget_exhausted",
        "workflow_id": "agent-42",
        "run_id": "run-1",
        "used": 1_200,
        "limit": 1_000,
        "waiting_since": "2026-03-04T05:06:07Z",
        "url": None,
    }
    assert slack_text(request, link=None, include_content=False) == (
        ":money_with_wings: Run `agent-42` used 1,200 of 1,000 tokens: it waits for a person"
        " to grant more or stop it"
    )
    stopped = NotifyRequest(
        event="run_finished", workflow_id="agent-42", run_id="run-1", finish_reason="budget"
    )
    assert slack_text(stopped, link=None, include_content=False) == (
        "Run `agent-42` was stopped at its token budget"
    )


def test_a_sub_agents_notification_names_both_runs():
    request = waiting(workflow_id="W.call_1", parent_workflow_id="W", parent_call_id="call_1")
    body = json_body(request, link=None, include_content=True)
    assert list(body)[-3:] == ["parent_workflow_id", "parent_call_id", "url"]
    assert (body["workflow_id"], body["parent_workflow_id"], body["parent_call_id"]) == (
        "W.call_1",
        "W",
        "call_1",
    )
    assert "parent_workflow_id" not in json_body(waiting(), link=None, include_content=True)
    line = slack_text(request, link=None, include_content=False)
    assert line == (
        ":hourglass_flowing_sand: `delete_path` is waiting for approval in run `W.call_1`"
        " (sub-agent of `W`, its call `call_1`) (call `call_2`, run id `run-1`)"
    )
    ended = NotifyRequest(
        event="run_finished", workflow_id="W.call_1", run_id="r", finish_reason="stop",
        parent_workflow_id="W", parent_call_id="call_1",
    )  # fmt: skip
    assert slack_text(ended, link=None, include_content=False) == (
        "Run `W.call_1` (sub-agent of `W`, its call `call_1`) finished"
    )
    assert json_body(ended, link=None, include_content=False)["parent_workflow_id"] == "W"
