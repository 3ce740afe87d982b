"""The worker's LLM settings refuse values that could only fail later, in errors that might quote
them: a key that cannot be an HTTP header, a token limit that is no count, a URL that is no
http(s) endpoint (and say so without the secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.settings import Settings

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
