"""`python -m starter` names the `AGENT_*`/`LLM_*` variables it does not know, one warning line
each on stderr with the nearest setting, and changes nothing else: not stdout (scripts read
`--json`), not the exit code. The web inbox and the codec server are started the same way."""

from __future__ import annotations

from tests.cli.test_starter import Agent, agent, start_waiting, starter
from tests.helpers import wait_until

__all__ = ["agent"]  # the fixture

MISSPELT = {"AGENT_POLCY_FILE": "policy.json", "LLM_BASEURL": "http://127.0.0.1:9/v1"}
WARNINGS = [
    "warning: AGENT_POLCY_FILE is not a setting (did you mean AGENT_POLICY_FILE?); ignored",
    "warning: LLM_BASEURL is not a setting (did you mean LLM_BASE_URL?); ignored",
]


async def test_the_starter_names_misspelt_settings_on_stderr_only(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")

    async def listed() -> bool:
        return workflow_id in (await agent.cli("pending", "--json")).stdout

    await wait_until(listed, timeout=30, interval=0.5)
    plain = await agent.cli("pending", "--json")
    misspelt = await starter("pending", "--json", env=agent.env(**MISSPELT))
    assert (misspelt.code, misspelt.stdout) == (plain.code, plain.stdout) == (0, plain.stdout)
    assert workflow_id in misspelt.stdout
    assert plain.stderr == ""
    assert misspelt.stderr.splitlines() == WARNINGS
    await agent.cli("cancel", workflow_id)


async def test_every_starter_program_warns_before_it_refuses(agent: Agent) -> None:
    """The codec server and the web inbox (here refusing to start: no key; a public address
    without a users file) warn first; the refusal and its exit code stay what they were."""
    no_key = {"AGENT_ENCRYPTION_KEY": "", "AGENT_ENCRYPTION_KEYS": ""}  # also with --encrypt
    codec = await starter("codec-server", "--port", "0", env=agent.env(**no_key, **MISSPELT))
    assert codec.code == 2, codec
    assert codec.stderr.splitlines()[:2] == WARNINGS
    assert codec.stderr.splitlines()[2].startswith("error: no encryption key"), codec.stderr
    web = await starter("web", "--host", "0.0.0.0", "--port", "0", env=agent.env(**MISSPELT))
    assert web.code == 2, web
    assert web.stderr.splitlines()[:2] == WARNINGS
    assert "is not a loopback address" in web.stderr.splitlines()[2], web.stderr


async def test_variables_the_tests_and_tools_read_are_no_warning(agent: Agent) -> None:
    """`./run tests` reads AGENT_TEST_PROCESSES, the browser tests AGENT_TEST_CHROMIUM: a person
    who sets them gets no warning from every program the tests start."""
    done = await agent.cli(
        "pending", AGENT_TEST_PROCESSES="2", AGENT_TEST_CHROMIUM="/usr/bin/chromium"
    )
    assert done.code == 0 and done.stderr == "", done


async def test_a_bad_setting_is_still_one_line_after_the_warnings(agent: Agent) -> None:
    env = agent.env(LLM_STREAM="flase", LLM_STRAEM="off")
    done = await starter("pending", env=env)
    assert done.code == 2
    assert done.stderr.splitlines() == [
        "warning: LLM_STRAEM is not a setting (did you mean LLM_STREAM?); ignored",
        "error: LLM_STREAM must be true or false (or 1/0, yes/no, on/off), got 'flase'",
    ]
