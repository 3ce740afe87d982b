"""What the real `python worker.py` says at start: one warning line for each `AGENT_*`/`LLM_*`
variable that is no setting, naming the nearest one (a misspelt setting used to start the worker
silently without it), and a ready line that says what is on: the policy file and its rule count,
encryption, notifications (where to, no secret), escalation, the budget's groups and the approvers
file with its number of people."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from temporalio.client import Client

from tests.people import make_people
from tests.reliability.processes import start_worker, stopping, worker_env

TOKEN = "T0KEN-9d1c7e"
RULES = {
    "enforced": [{"tool": "delete_path", "decision": "ask"}],
    "defaults": [
        {"tool": "read_file", "decision": "allow"},
        {"tool": "list_dir", "decision": "allow"},
    ],
}


def environment(client: Client, queue: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return worker_env(
        address=client.service_client.config.target_host,
        task_queue=queue,
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        llm_base_url=None,
        extra={"AGENT_SANDBOX": "off", **extra},
    )


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " is not a setting" in line]


async def test_misspelt_settings_are_named_and_the_worker_starts_with_its_policy(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(RULES))
    env = environment(
        client,
        task_queue,
        tmp_path,
        AGENT_POLICY_FILE=str(policy),
        AGENT_POLCY_FILE=str(policy),
        LLM_BASEURL="http://127.0.0.1:9/v1",
        AGENT_TEST_CHROMIUM="/usr/bin/chromium",  # read by the tests: never warned about
    )
    worker = await start_worker("misspelt", env, tmp_path / "logs")
    with stopping(worker):
        ready = worker.output()[-1]
        said = worker.stderr_path.read_text()
    assert warnings(said) == [
        "worker: warning: AGENT_POLCY_FILE is not a setting (did you mean AGENT_POLICY_FILE?);"
        " ignored",
        "worker: warning: LLM_BASEURL is not a setting (did you mean LLM_BASE_URL?); ignored",
    ], said
    assert ready.startswith(f"worker ready task_queue={task_queue} address="), ready
    assert f" policy={policy}(3 rules) " in ready, ready


async def test_the_ready_line_says_what_is_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    env = environment(
        client,
        task_queue,
        tmp_path,
        AGENT_ENCRYPTION_KEY=key,
        AGENT_NOTIFY_URL=f"https://hooks.example:8443/services/{TOKEN}?k={TOKEN}",
        AGENT_ESCALATE_AFTER_SECONDS="300",
        AGENT_ESCALATE_TO="ops, leads",
        AGENT_BUDGET_GROUPS="finance,ops",
        AGENT_APPROVERS_FILE=str(
            make_people(tmp_path / "people", {"ann": ["ops"], "ben": []}).path
        ),
    )
    worker = await start_worker("all-on", env, tmp_path / "logs")
    with stopping(worker):
        ready = worker.output()[-1]
        said = worker.stderr_path.read_text()
    assert warnings(said) == [], said
    assert TOKEN not in ready and TOKEN not in said
    assert " run_command=on limits=" in ready and " sandbox=none " in ready, ready
    assert ready.endswith(
        " policy=none encryption=on notifications=on(https://hooks.example:8443)"
        " escalation=after 300s to ops,leads budget_groups=finance,ops"
        f" approvers={tmp_path / 'people' / 'approvers'}(2 people) sub_agents=off"
    ), ready


async def test_the_ready_line_of_a_worker_with_nothing_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    worker = await start_worker("none-on", environment(client, task_queue, tmp_path), tmp_path)
    with stopping(worker):
        ready = worker.output()[-1]
    assert ready.endswith(
        " sandbox=none policy=none encryption=off notifications=off escalation=off"
        " budget_groups=any approvers=none sub_agents=off"
    ), ready
