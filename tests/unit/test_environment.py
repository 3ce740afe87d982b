"""Every setting is read by one typed model with one rule per kind of value: a typo never flips a
switch or picks a default silently, and what is refused is said in one line that starts with the
variable's name and says what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.modes import TEXT_CALL_MODES
from runtime.setting_error import SettingError
from runtime.settings import BadSetting, Settings

SWITCHES = [
    ("LLM_STREAM", "llm_stream"),
    ("LLM_PARALLEL_TOOL_CALLS", "llm_parallel_tool_calls"),
    ("AGENT_STREAM_DELTAS", "stream_deltas"),
    ("AGENT_COMMAND_NETWORK", "command_network"),
    ("AGENT_BUILTIN_TOOLS", "builtin_tools"),
    ("AGENT_NOTIFY_ARGUMENTS", "notify_arguments"),
    ("AGENT_TRACE_CONTENT", "trace_content"),
]


def refused(env: dict[str, str]) -> str:
    with pytest.raises(BadSetting) as caught:
        Settings.read(env)
    message = str(caught.value)
    assert "\n" not in message
    assert isinstance(caught.value, SettingError)  # what every program catches at start
    return message


@pytest.mark.parametrize(("name", "attribute"), SWITCHES)
@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("true", True),
        ("1", True),
        ("YES", True),
        (" on ", True),
        ("false", False),
        ("0", False),
        ("No", False),
        ("OFF", False),
    ],
)
def test_every_switch_takes_the_same_words(name, attribute, raw, value):
    assert getattr(Settings.read({name: raw}), attribute) is value


@pytest.mark.parametrize(("name", "attribute"), SWITCHES)
@pytest.mark.parametrize("raw", ["flase", "ture", "2", "enabled", "y"])
def test_a_switch_with_any_other_word_is_refused(name, attribute, raw):
    assert refused({name: raw}) == (
        f"{name} must be true or false (or 1/0, yes/no, on/off), got {raw!r}"
    )


def test_the_typos_of_the_report_no_longer_flip_the_setting(tmp_path: Path):
    """`LLM_STREAM=flase` turned streaming on and `AGENT_COMMAND_NETWORK=ture` left the network
    off: both stop the worker now."""
    base = {"AGENT_WORKSPACE": str(tmp_path / "ws")}
    for name, raw in [("LLM_STREAM", "flase"), ("AGENT_COMMAND_NETWORK", "ture")]:
        with pytest.raises(ValueError, match=f"^{name} must be true or false"):
            Settings.from_env({**base, name: raw})


@pytest.mark.parametrize(
    ("name", "raw", "accepts"),
    [
        ("AGENT_SANDBOX", "maybe", "one of auto, required, off"),
        ("LLM_TEXT_TOOL_CALLS", "always", "one of " + ", ".join(TEXT_CALL_MODES)),
        ("AGENT_NOTIFY_FORMAT", "teams", "one of json, slack"),
    ],
)
def test_a_mode_is_one_of_its_words(name, raw, accepts):
    assert refused({name: raw}) == f"{name} must be {accepts}, got {raw!r}"


def test_modes_ignore_case():
    assert Settings.read({"AGENT_SANDBOX": "Required"}).sandbox == "required"


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("LLM_TIMEOUT_SECONDS", "seconds"),
        ("AGENT_COMMAND_TIMEOUT_SECONDS", "seconds"),
        ("AGENT_STREAM_FLUSH_SECONDS", "seconds"),
        ("AGENT_STREAM_FLUSH_CHARS", "characters"),
        ("AGENT_STATE_RETENTION_DAYS", "days"),
        ("AGENT_MAX_CONVERSATION_MB", "megabytes"),
    ],
)
@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_numbers_are_positive(name, what, raw):
    assert refused({name: raw}) == f"{name} must be a positive number of {what}, got {raw!r}"


@pytest.mark.parametrize(
    "name",
    [
        "LLM_MAX_TOKENS",
        "LLM_CONTEXT_TOKENS",
        "AGENT_COMMAND_MAX_PROCESSES",
        "AGENT_COMMAND_MAX_MEMORY_MB",
    ],
)
@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "lots"])
def test_counts_are_positive_whole_numbers(name, raw):
    assert refused({name: raw}) == f"{name} must be a positive whole number, got {raw!r}"


def test_numbers_read_as_numbers():
    env = Settings.read({"LLM_TIMEOUT_SECONDS": "2.5", "LLM_MAX_TOKENS": " 300 "})
    assert (env.llm_timeout_seconds, env.llm_max_tokens) == (2.5, 300)


@pytest.mark.parametrize(
    "name",
    ["LLM_BASE_URL", "AGENT_NOTIFY_URL", "AGENT_INBOX_URL", "AGENT_S3_ENDPOINT_URL"],
)
@pytest.mark.parametrize("raw", ["localhost:8080/v1", "ftp://host/x", "http://", "http://h:port"])
def test_urls_need_an_http_scheme_and_a_host(name, raw):
    assert refused({name: raw}).startswith(f"{name} must be an http:// or https:// URL, got ")


@pytest.mark.parametrize("raw", ["9464", "127.0.0.1", "host:0", "host:65536", ":9464", "h:x"])
def test_an_address_is_host_and_a_port_number(raw):
    assert refused({"AGENT_METRICS_ADDRESS": raw}) == (
        f"AGENT_METRICS_ADDRESS must be HOST:PORT (e.g. 127.0.0.1:9464), got {raw!r}"
    )


@pytest.mark.parametrize("raw", ["0", "65", "two"])
def test_the_process_count_is_bounded(raw):
    assert refused({"AGENT_WORKER_PROCESSES": raw}) == (
        f"AGENT_WORKER_PROCESSES must be a whole number from 1 to 64, got {raw!r}"
    )


def test_lists_name_the_entry_they_refuse():
    assert refused({"AGENT_COMMAND_ENV": "OK, BAD=1"}) == (
        "AGENT_COMMAND_ENV lists 'BAD=1', which is not a variable name"
    )
    assert refused({"AGENT_TOOLS": "pkg.mod:tool,not a spec"}) == (
        "AGENT_TOOLS lists 'not a spec', which is not package.module:attribute"
    )


def test_a_refused_secret_is_never_quoted():
    message = refused({"LLM_API_KEY": "sk-SECRET\tpart"})
    assert message.startswith("LLM_API_KEY has white space at position 10")
    assert "SECRET" not in message
    message = refused({"AGENT_NOTIFY_URL": "hooks.slack.com/services/T0/B0/SECRET"})
    assert "SECRET" not in message


def test_blank_means_unset_and_secrets_stay_out_of_the_repr():
    env = Settings.read({"LLM_STREAM": "  ", "LLM_API_KEY": "sk-SECRET", "LLM_MODEL": ""})
    assert env.llm_stream is True
    assert env.llm_model == "gpt-4o-mini"
    assert "sk-SECRET" not in repr(env)


def test_several_bad_values_are_one_line_naming_the_first():
    assert refused({"LLM_STREAM": "flase", "AGENT_SANDBOX": "x"}) == (
        "LLM_STREAM must be true or false (or 1/0, yes/no, on/off), got 'flase'"
        " (and 1 more setting(s) refused)"
    )


def test_the_model_reads_the_process_environment(monkeypatch):
    """`Settings()` is a `BaseSettings`: without a mapping it reads the process's variables."""
    monkeypatch.setenv("LLM_STREAM", "off")
    monkeypatch.setenv("AGENT_SANDBOX", "off")
    assert (Settings().llm_stream, Settings.read().sandbox) == (False, "off")
