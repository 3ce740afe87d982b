"""Signed answers: the canonical bytes, a person's key, the answer's fields, the retired shared
key, the users file's groups (which carry no authority now)."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.approvers import DOES_NOT_VERIFY, NO_FILE, AnswerVerifier
from runtime.settings import BadSetting, Settings
from runtime.signing_key import signed_answer
from starter.web.auth import UsersFile, UsersFileError, add_user, parse_users, user_line
from tests.people import module_people
from workflows.model import ApprovalEvent, ApprovalRecord, ToolApprovalResponse
from workflows.people.signatures import (
    SignedFields,
    VerifyRequest,
    canonical_bytes,
    decision_of,
    signed_at_text,
)

FIELDS = SignedFields(
    approver="alice",
    workflow_id="agent-1",
    run_id="run-1",
    call_id="c1",
    arguments_sha256="a" * 64,
    decision="approve",
    signed_at="2026-12-02T14:00:00.000000Z",
)
PEOPLE = module_people({"alice": ["ops", "dev"], "bob": ["ops"]}, via={"web": ["alice"]})
KEY = PEOPLE.key("alice")
DIGEST = "b" * 64


def verifies(fields: SignedFields, signature: str) -> bool:
    request = VerifyRequest(**dataclasses.asdict(fields), signature=signature)
    return PEOPLE.approvers.verify(request).valid


def test_the_canonical_bytes_are_fixed_and_name_no_groups():
    assert canonical_bytes(FIELDS) == (
        b'["agent-decision-2","alice","agent-1","run-1","c1",'
        + b'"' + b"a" * 64 + b'","approve","2026-12-02T14:00:00.000000Z",""]'
    )  # fmt: skip
    through = dataclasses.replace(FIELDS, signed_by="web")
    assert canonical_bytes(through).endswith(b',"web"]')


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("approver", "bob"),
        ("workflow_id", "agent-2"),
        ("run_id", "run-2"),
        ("call_id", "c2"),
        ("arguments_sha256", "c" * 64),
        ("decision", "reject"),
        ("signed_at", "2026-12-02T14:00:01.000000Z"),
        ("signed_by", "web"),
    ],
)
def test_a_signature_covers_every_field(name, value):
    signature = KEY.sign(FIELDS)
    assert verifies(FIELDS, signature)
    assert not verifies(dataclasses.replace(FIELDS, **{name: value}), signature)


def test_the_decision_is_a_string_any_answer_can_use():
    assert decision_of(True) == "approve" and decision_of(False) == "reject"
    as_answer = dataclasses.replace(FIELDS, decision="answer:" + "d" * 64)
    assert KEY.sign(as_answer) != KEY.sign(FIELDS)


def test_another_persons_key_does_not_verify():
    assert not verifies(FIELDS, PEOPLE.key("bob").sign(FIELDS))


def test_signed_at_is_iso_utc_with_z():
    moment = datetime(2026, 12, 2, 14, 0, 0, 5, tzinfo=UTC)
    assert signed_at_text(moment) == "2026-12-02T14:00:00.000005Z"


def test_a_signed_answer_binds_the_answer_and_its_json_carries_the_signature():
    response = ToolApprovalResponse(call_id="c1", approved=True, groups=["admin"])
    now = datetime(2026, 12, 2, 14, tzinfo=UTC)
    signed = signed_answer(
        KEY,
        response,
        approver="alice",
        workflow_id="agent-1",
        run_id="run-1",
        arguments_sha256=DIGEST,
        now=now,
    )
    data = signed.model_dump(mode="json")
    assert data["approver"] == "alice" and "groups" not in data and "signed_by" not in data
    assert data["run_id"] == "run-1" and data["arguments_sha256"] == DIGEST
    assert data["signed_at"] == "2026-12-02T14:00:00.000000Z"
    assert len(base64.b64decode(data["signature"])) == 64
    assert ToolApprovalResponse.model_validate(data) == signed
    fields = SignedFields("alice", "agent-1", "run-1", "c1", DIGEST, "approve", data["signed_at"])
    assert verifies(fields, data["signature"])
    through = signed_answer(
        PEOPLE.key("web"), response, approver="alice", workflow_id="agent-1", run_id="run-1",
        arguments_sha256=DIGEST, now=now,
    ).model_dump(mode="json")  # fmt: skip
    assert through["signed_by"] == "web"
    assert verifies(dataclasses.replace(fields, signed_by="web"), through["signature"])
    with pytest.raises(ValueError, match="does not sign for bob"):
        signed_answer(PEOPLE.key("web"), response, approver="bob", workflow_id="agent-1",
                      run_id="run-1", arguments_sha256=DIGEST)  # fmt: skip


def test_an_unsigned_answer_reads_as_before():
    response = ToolApprovalResponse(call_id="c1", approved=True, approver="ann")
    assert response.model_dump(mode="json") == {
        "call_id": "c1",
        "approved": True,
        "reason": None,
        "approver": "ann",
    }
    record = ApprovalRecord(call_id="c1", approved=True, at=datetime.now(UTC))
    assert not {"groups", "signed_at", "signature"} & set(record.model_dump())
    event = ApprovalEvent(**record.model_dump())
    assert "signature" not in event.model_dump(mode="json")


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"signature": "A" * 86 + "=="}, "a signature needs signed_at and approver"),
        ({"signed_at": "2026-12-02T14:00:00Z"}, "signed_at is only taken with a signature"),
        ({"signature": "not base64", "signed_at": "2026-12-02T14:00:00Z"}, "signature"),
        ({"signature": "A" * 86 + "==", "signed_at": "yesterday"}, "signed_at"),
        (
            {"signature": "A" * 86 + "==", "signed_at": "2026-12-02T14:00:00Z", "signed_by": "a b"},
            "signed_by",
        ),
        ({"groups": ["ops", "no spaces"]}, "groups"),
    ],
)
def test_a_malformed_signed_answer_is_refused(given, why):
    with pytest.raises(ValidationError, match=why):
        ToolApprovalResponse.model_validate(
            {"call_id": "c1", "approved": True, "approver": "ann", **given}
        )


async def test_the_verifier_says_why_it_refuses():
    request = VerifyRequest(**dataclasses.asdict(FIELDS), signature=KEY.sign(FIELDS))
    verdict = await PEOPLE.verifier().verify_answer(request)
    assert verdict.valid and verdict.groups == ["dev", "ops"]
    forged = request.model_copy(update={"approver": "bob"})
    refused = await PEOPLE.verifier().verify_answer(forged)
    assert not refused.valid and refused.problem == DOES_NOT_VERIFY
    no_file = await AnswerVerifier(None).verify_answer(request)
    assert not no_file.valid and no_file.problem == NO_FILE


@pytest.mark.parametrize("value", ["short", base64.b64encode(b"x" * 32).decode()])
def test_the_shared_approver_key_is_retired_in_one_line(value):
    with pytest.raises(BadSetting) as caught:
        Settings.read({"AGENT_APPROVER_KEY": value})
    assert str(caught.value) == (
        "AGENT_APPROVER_KEY is retired: each person signs with their own key; list people and"
        " their keys in AGENT_APPROVERS_FILE (docs/approvers.md)"
    )


def test_the_key_settings_are_paths(tmp_path):
    environ = {
        "AGENT_APPROVERS_FILE": str(tmp_path / "approvers"),
        "AGENT_SIGNING_KEY": "~/.ssh/mine",
        "AGENT_WEB_SIGNING_KEY": str(tmp_path / "web.key"),
        "AGENT_WORKSPACE": str(tmp_path / "ws"),
    }
    settings = Settings.from_env(environ)
    assert settings.approvers_file == tmp_path / "approvers"
    assert settings.signing_key == Path("~/.ssh/mine").expanduser()
    assert settings.web_signing_key == tmp_path / "web.key"


def test_users_file_lines_carry_groups(tmp_path: Path):
    path = tmp_path / "users"
    add_user(path, "alice", "pw", with_token=False, groups=["ops", "dev", "ops"])
    add_user(path, "bob", "pw", with_token=True)
    users = parse_users(path.read_text())
    assert users["alice"].groups == ("dev", "ops") and users["bob"].groups == ()
    assert user_line(users["alice"]).endswith(":dev,ops")
    assert ":" not in user_line(users["bob"]).partition(":")[2]
    add_user(path, "alice", "new password", with_token=False)  # no --group: kept
    assert UsersFile(path).groups_of("alice") == ("dev", "ops")
    add_user(path, "alice", "pw", with_token=False, groups=["sec"])  # --group: set
    assert UsersFile(path).groups_of("alice") == ("sec",)
    assert UsersFile(path).groups_of("nobody") == ()


def test_a_bad_group_is_refused(tmp_path: Path):
    path = tmp_path / "users"
    with pytest.raises(UsersFileError, match="a group name"):
        add_user(path, "alice", "pw", with_token=False, groups=["o p s"])
    add_user(path, "alice", "pw", with_token=False)
    path.write_text(path.read_text().rstrip("\n") + ":ops,bad group\n")
    with pytest.raises(UsersFileError, match="line 1: a group name"):
        parse_users(path.read_text())
