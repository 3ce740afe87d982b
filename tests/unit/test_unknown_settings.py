"""A variable that starts with `AGENT_` or `LLM_` and is no setting is a mistake (a misspelt
setting used to start the worker silently without it): every program names each one at start, in
one line with the nearest setting, and goes on. The variables the project's own tests and tools
read are no mistake, and neither is one `AGENT_COMMAND_ENV` passes on to the commands."""

from __future__ import annotations

import io
import re
from pathlib import Path

from runtime.settings import ALSO_READ, unknown_settings, variables, warn_unknown_settings

ROOT = Path(__file__).resolve().parents[2]


def test_a_misspelt_setting_is_named_with_the_nearest_one():
    assert unknown_settings({"LLM_BASEURL": "http://h/v1", "AGENT_POLCY_FILE": "p.json"}) == [
        "warning: AGENT_POLCY_FILE is not a setting (did you mean AGENT_POLICY_FILE?); ignored",
        "warning: LLM_BASEURL is not a setting (did you mean LLM_BASE_URL?); ignored",
    ]
    assert unknown_settings({"LLM_WORKSPACE": "ws"}) == [
        "warning: LLM_WORKSPACE is not a setting (did you mean AGENT_WORKSPACE?); ignored"
    ]  # compared without the prefix, which every name shares: AGENT_QQQ is near none
    assert unknown_settings({"AGENT_QQQ": "1"}) == ["warning: AGENT_QQQ is not a setting; ignored"]


def test_settings_other_prefixes_and_what_the_tests_read_are_not_named():
    environ = {name: "x" for name in [*variables(), *ALSO_READ]}
    environ |= {"PATH": "/bin", "TEMPORAL_ADDRESS": "h:1", "agent_lower": "x", "OTEL_X": "1"}
    assert unknown_settings(environ) == []


def test_a_variable_passed_on_to_the_commands_is_not_named():
    environ = {"AGENT_COMMAND_ENV": "AGENT_DEPLOY_TOKEN, LLM_OWN", "AGENT_DEPLOY_TOKEN": "t"}
    assert unknown_settings({**environ, "LLM_OWN": "x", "LLM_OTHER": "y"}) == [
        "warning: LLM_OTHER is not a setting; ignored"
    ]


def test_a_name_that_is_no_plain_name_is_quoted():
    assert unknown_settings({"LLM_\x1b[2Kx": "1"}) == [
        "warning: 'LLM_\\x1b[2Kx' is not a setting; ignored"
    ]


def test_the_warnings_go_to_the_stream_given_after_the_prefix():
    out = io.StringIO()
    warn_unknown_settings("worker: ", {"LLM_STRAEM": "off", "LLM_STREAM": "off"}, out)
    assert out.getvalue() == (
        "worker: warning: LLM_STRAEM is not a setting (did you mean LLM_STREAM?); ignored\n"
    )


READS = [
    re.compile(r"environ(?:\.get)?[\[(]\s*\"((?:AGENT|LLM)_[A-Z0-9_]+)\""),
    re.compile(r"getenv\(\s*\"((?:AGENT|LLM)_[A-Z0-9_]+)\""),
    re.compile(r"\$\{?((?:AGENT|LLM)_[A-Z0-9_]+)"),
]


def test_every_variable_the_project_reads_is_a_setting_or_listed_as_read():
    """Each `AGENT_*`/`LLM_*` variable read anywhere (the programs, the tests, the bench, the
    scripts) is a setting or in `ALSO_READ`, and `ALSO_READ` lists nothing no one reads."""
    files = [*ROOT.glob("*.py"), ROOT / "run", ROOT / ".ci" / "run"]
    for folder in ("activities", "bench", "runtime", "starter", "tests", "workflows"):
        files += (ROOT / folder).rglob("*.py")
    read: set[str] = set()
    for path in files:
        text = path.read_text()
        for pattern in READS:
            read |= set(pattern.findall(text))
    assert "AGENT_TEST_PROCESSES" in read and "AGENT_E2E_LLM_MODEL" in read, "the scan is broken"
    assert read - set(variables()) - set(ALSO_READ) == set()
    assert set(ALSO_READ) - read == set()
