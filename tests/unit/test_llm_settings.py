"""The worker's LLM settings refuse values that could only fail later, in errors that might quote
them: a key that cannot be an HTTP header, a token limit that is no count, a URL that is no
http(s) endpoint (and say so without the secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.settings import Settings

KEY = "sk-proj-SECRET-4c1d"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws"), **env})


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        (f"{KEY}\nsecond-line", "a line break"),
        (f"{KEY}\rx", "a line break"),
        (f"{KEY} {KEY}", "white space"),
        (f"{KEY}\tx", "white space"),
        (f"{KEY}\x00x", "a control character"),
        (f"{KEY}\x1bx", "a control character"),
        (f"{KEY}éx", "a non-ASCII character"),
    ],
    ids=["newline", "carriage-return", "space", "tab", "nul", "escape", "non-ascii"],
)
def test_a_key_that_cannot_be_a_header_is_refused_without_showing_it(tmp_path, key, kind):
    with pytest.raises(ValueError) as caught:
        settings(tmp_path, LLM_BASE_URL="http://127.0.0.1:1/v1", LLM_API_KEY=key)
    message = str(caught.value)
    assert "LLM_API_KEY" in message and kind in message
    assert KEY not in message and "second-line" not in message
    assert caught.value.__cause__ is None


def test_a_key_read_with_its_trailing_newline_is_fine(tmp_path):
    loaded = settings(tmp_path, LLM_BASE_URL="https://api.example.test/v1", LLM_API_KEY=f"{KEY}\n")
    assert loaded.llm_api_key == KEY
    assert KEY not in repr(loaded)


def test_llm_max_tokens(tmp_path):
    assert settings(tmp_path).llm_max_tokens is None
    assert settings(tmp_path, LLM_MAX_TOKENS=" 512 ").llm_max_tokens == 512
    for bad in ["0", "-5", "lots", "1.5"]:
        with pytest.raises(ValueError, match="LLM_MAX_TOKENS must be a positive whole number"):
            settings(tmp_path, LLM_MAX_TOKENS=bad)


def test_a_base_url_that_is_no_endpoint_is_refused_redacted(tmp_path):
    for bad in ["ftp://user:pw-SECRET@host/v1", "api.openai.com/v1?key=Q-SECRET", "http://[::1"]:
        with pytest.raises(ValueError, match="LLM_BASE_URL must be an http") as caught:
            settings(tmp_path, LLM_BASE_URL=bad)
        assert "SECRET" not in str(caught.value)


def test_url_credentials_are_not_in_the_settings_repr(tmp_path):
    loaded = settings(tmp_path, LLM_BASE_URL="https://user:pw-SECRET@host/v1/?key=Q-SECRET/")
    assert loaded.llm_base_url == "https://user:pw-SECRET@host/v1?key=Q-SECRET/"
    assert "SECRET" not in repr(loaded)


# ---------------------------------------------------------------- local models' settings


def test_text_tool_calls(tmp_path):
    assert settings(tmp_path).llm_text_tool_calls == "parse"
    for mode in ["parse", "warn", "off", "bare", " WARN "]:
        assert settings(tmp_path, LLM_TEXT_TOOL_CALLS=mode).llm_text_tool_calls == (
            mode.strip().lower()
        )
    with pytest.raises(
        ValueError, match="LLM_TEXT_TOOL_CALLS must be one of parse, warn, off, bare"
    ):
        settings(tmp_path, LLM_TEXT_TOOL_CALLS="maybe")


def test_parallel_tool_calls(tmp_path):
    assert settings(tmp_path).llm_parallel_tool_calls is True
    assert settings(tmp_path, LLM_PARALLEL_TOOL_CALLS="false").llm_parallel_tool_calls is False
    assert settings(tmp_path, LLM_PARALLEL_TOOL_CALLS="1").llm_parallel_tool_calls is True
    with pytest.raises(ValueError, match="LLM_PARALLEL_TOOL_CALLS must be true or false"):
        settings(tmp_path, LLM_PARALLEL_TOOL_CALLS="sometimes")


def test_context_tokens_and_summary_model(tmp_path):
    loaded = settings(tmp_path)
    assert loaded.llm_context_tokens is None and loaded.llm_summary_model is None
    loaded = settings(tmp_path, LLM_CONTEXT_TOKENS="2048", LLM_SUMMARY_MODEL=" small ")
    assert loaded.llm_context_tokens == 2048 and loaded.llm_summary_model == "small"
    with pytest.raises(ValueError, match="LLM_CONTEXT_TOKENS must be a positive whole number"):
        settings(tmp_path, LLM_CONTEXT_TOKENS="8k")


def test_system_prompt_as_text_or_from_a_file(tmp_path):
    assert settings(tmp_path).system_prompt is None
    text = "After a tool response, answer in plain text."
    assert settings(tmp_path, AGENT_SYSTEM_PROMPT=f" {text} ").system_prompt == text
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(f"{text}\nBe brief.\n")
    loaded = settings(tmp_path, AGENT_SYSTEM_PROMPT=f"@{prompt_file}")
    assert loaded.system_prompt == f"{text}\nBe brief."
    assert text not in repr(loaded)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read"),
        ("", "is empty"),
        (b"\xff\xfe", "is not UTF-8"),
        ("x" * 100_001, "bytes"),
    ],
    ids=["missing", "empty", "not-utf8", "too-big"],
)
def test_a_system_prompt_file_the_worker_cannot_use_is_refused(tmp_path, content, problem):
    path = tmp_path / "prompt.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match="AGENT_SYSTEM_PROMPT") as caught:
        settings(tmp_path, AGENT_SYSTEM_PROMPT=f"@{path}")
    assert problem in str(caught.value) and "\n" not in str(caught.value)
