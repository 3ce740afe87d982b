"""The notification settings: AGENT_NOTIFY_URL (http or https only, never shown beyond its host),
AGENT_NOTIFY_FORMAT, AGENT_NOTIFY_ARGUMENTS (off by default with encryption) and
AGENT_INBOX_URL; a value the worker cannot use is one line naming the variable."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from runtime.settings import Settings, shown_notify_url

TOKEN = "XyZ9sEcReTtOkEn42abcdefg"
SLACK = f"https://hooks.slack.com/services/T0001/B0002/{TOKEN}"
KEY = base64.b64encode(os.urandom(32)).decode()


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws"), **env})


def test_without_a_url_nobody_is_notified(tmp_path):
    got = settings(tmp_path)
    assert got.notify_url is None
    assert got.notify_format == "json"
    assert got.inbox_url is None


def test_the_url_format_and_inbox_are_read(tmp_path):
    got = settings(
        tmp_path,
        AGENT_NOTIFY_URL=f"  {SLACK} ",
        AGENT_NOTIFY_FORMAT="Slack",
        AGENT_INBOX_URL="https://inbox.example:8443/agent/",
    )
    assert got.notify_url == SLACK
    assert got.notify_format == "slack"
    assert got.inbox_url == "https://inbox.example:8443/agent"


def test_the_url_never_shows_in_the_settings_repr(tmp_path):
    got = settings(tmp_path, AGENT_NOTIFY_URL=f"https://user:pw1234@hooks.example/x/{TOKEN}?k=v")
    assert TOKEN not in repr(got)
    assert "pw1234" not in repr(got)


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://hooks.example/{TOKEN}",
        f"hooks.slack.com/services/{TOKEN}",
        f"https:///{TOKEN}",
        f"http://[::1/{TOKEN}",
        f"http://host:notaport/{TOKEN}",
        f"file:///tmp/{TOKEN}",
    ],
)
def test_a_url_that_is_not_http_stops_the_worker_without_showing_its_token(tmp_path, url):
    with pytest.raises(ValueError) as caught:
        settings(tmp_path, AGENT_NOTIFY_URL=url)
    message = str(caught.value)
    assert message.startswith("AGENT_NOTIFY_URL must be an http:// or https:// URL, got ")
    assert "\n" not in message
    assert TOKEN not in message


def test_a_format_other_than_json_or_slack_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^AGENT_NOTIFY_FORMAT must be one of json, slack, got"):
        settings(tmp_path, AGENT_NOTIFY_FORMAT="teams")


def test_arguments_go_out_by_default_without_encryption_and_not_with_it(tmp_path):
    assert settings(tmp_path).notify_arguments is True
    assert settings(tmp_path, AGENT_ENCRYPTION_KEY=KEY).notify_arguments is False
    assert settings(tmp_path, AGENT_ENCRYPTION_KEYS=f"k1:{KEY}").notify_arguments is False
    on = settings(tmp_path, AGENT_ENCRYPTION_KEY=KEY, AGENT_NOTIFY_ARGUMENTS="true")
    assert on.notify_arguments is True
    off = settings(tmp_path, AGENT_NOTIFY_ARGUMENTS="false")
    assert off.notify_arguments is False


def test_a_typo_in_notify_arguments_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^AGENT_NOTIFY_ARGUMENTS must be true or false"):
        settings(tmp_path, AGENT_NOTIFY_ARGUMENTS="ture")


@pytest.mark.parametrize(
    "url",
    [
        "inbox.example/runs",
        "https://ann:secret@inbox.example",
        "https://inbox.example/?token=abc",
        "https://inbox.example/#top",
    ],
)
def test_an_inbox_url_that_cannot_be_linked_to_is_refused(tmp_path, url):
    with pytest.raises(ValueError, match=r"^AGENT_INBOX_URL must be") as caught:
        settings(tmp_path, AGENT_INBOX_URL=url)
    assert "secret" not in str(caught.value)
    assert "abc" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SLACK, "https://hooks.slack.com/…"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        (f"http://ann:{TOKEN}@[::1]:9/", "http://[::1]:9"),
        (f"https://hooks.example?token={TOKEN}", "https://hooks.example/…"),
        ("not a url", "<not a URL>"),
        ("http://[::1", "<unreadable URL>"),
    ],
)
def test_the_url_is_shown_as_its_scheme_host_and_port_only(url, shown):
    assert shown_notify_url(url) == shown
