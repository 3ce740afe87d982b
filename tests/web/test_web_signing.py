"""The web app's signing service (AGENT_WEB_SIGNING_KEY): the real `python -m starter web` says at
start whether it signs and for whom, and refuses to start (exit 2, one line) with a key that is no
signing service's in AGENT_APPROVERS_FILE; the server's own check of the key, for each case."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.settings import Settings
from starter.web.auth import add_user
from starter.web.server import StartError, web_signing
from tests.people import make_people
from tests.web.test_server_processes import ROOT, clean_env

pytestmark = pytest.mark.web


def settings(**values: object) -> Settings:
    return Settings.read({}).model_copy(update=values)


def test_the_server_says_whether_it_signs_and_for_whom(tmp_path: Path) -> None:
    people = make_people(tmp_path, {"ann": ["ops"], "ben": ["ops"]}, via={"web": ["ann"]})
    key, line = web_signing(
        settings(approvers_file=people.path, web_signing_key=people.key_files["web"]), local=False
    )
    assert key is not None and key.service == "web"
    assert line == "signs through web for ann; others' answers go unsigned"
    none, unset = web_signing(settings(), local=False)
    assert none is None and unset.startswith("signs nothing: AGENT_WEB_SIGNING_KEY is not set")
    local_key, local = web_signing(
        settings(approvers_file=people.path, web_signing_key=people.key_files["web"]), local=True
    )
    assert local_key is None and local.startswith("signs nothing in local mode")
    with pytest.raises(StartError, match="is ann's own key: the web app signs with a signing"):
        web_signing(
            settings(approvers_file=people.path, web_signing_key=people.key_files["ann"]),
            local=False,
        )
    with pytest.raises(StartError, match="AGENT_APPROVERS_FILE is not set"):
        web_signing(settings(web_signing_key=people.key_files["web"]), local=False)


async def test_starter_web_says_so_at_start_and_refuses_a_persons_key(
    client: Client, tmp_path: Path
) -> None:
    people = make_people(
        tmp_path / "people", {"ann": ["ops"], "ben": ["ops"]}, via={"web": ["ann", "ben"]},
        keygen=True,
    )  # fmt: skip
    users = tmp_path / "users"
    add_user(users, "ann", "a password", with_token=False)
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_WEB_USERS_FILE=str(users),
        AGENT_APPROVERS_FILE=str(people.path),
        AGENT_WEB_SIGNING_KEY=str(people.key_files["web"]),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "web", "--port", "0", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        second = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert first.startswith("approval inbox at http://127.0.0.1:"), first
    assert second == "web: signs through web for ann, ben; others' answers go unsigned\n"
    env["AGENT_WEB_SIGNING_KEY"] = str(people.key_files["ann"])
    refused = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "web", "--port", "0", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(refused.communicate(), 60)
    assert refused.returncode == 2 and out == b""
    assert err.decode().startswith(f"error: AGENT_WEB_SIGNING_KEY {people.key_files['ann']} is")
    assert err.decode().count("\n") == 1
