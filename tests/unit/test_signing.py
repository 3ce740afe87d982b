"""Signed answers: the canonical bytes, the key, the answer's fields, the users file's groups."""

from __future__ import annotations

import base64
import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.approver_key import DOES_NOT_VERIFY, NO_KEY, AnswerVerifier, ApproverKey
from runtime.approver_key import sign_answer as sign
from runtime.settings import BadSetting, Settings
from starter.web.auth import UsersFile, UsersFileError, add_user, parse_users, user_line
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
    groups=("ops", "dev"),
    workflow_id="agent-1",
    run_id="run-1",
    call_id="c1",
    arguments_sha256="a" * 64,
    decision="approve",
    signed_at="2026-12-02T14:00:00.000000Z",
)
KEY = ApproverKey(os.urandom(32))
DIGEST = "b" * 64


def test_the_canonical_bytes_are_fixed_and_groups_have_one_order():
    assert canonical_bytes(FIELDS) == (
        b'["agent-answer-1","alice",["dev","ops"],"agent-1","run-1","c1",'
        + b'"' + b"a" * 64 + b'","approve","2026-12-02T14:00:00.000000Z"]'
    )  # fmt: skip
    shuffled = dataclasses.replace(FIELDS, groups=("dev", "ops", "dev"))
    assert canonical_bytes(shuffled) == canonical_bytes(FIELDS)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("approver", "mallory"),
        ("groups", ("ops", "dev", "admin")),
        ("workflow_id", "agent-2"),
        ("run_id", "run-2"),
        ("call_id", "c2"),
        ("arguments_sha256", "c" * 64),
        ("decision", "reject"),
        ("signed_at", "2026-12-02T14:00:01.000000Z"),
    ],
)
def test_a_signature_covers_every_field(name, value):
    signature = KEY.sign(FIELDS)
    assert KEY.verifies(FIELDS, signature)
    assert not KEY.verifies(dataclasses.replace(FIELDS, **{name: value}), signature)


def test_the_decision_is_a_string_any_answer_can_use():
    assert decision_of(True) == "approve" and decision_of(False) == "reject"
    as_answer = dataclasses.replace(FIELDS, decision="answer:" + "d" * 64)
    assert KEY.sign(as_answer) != KEY.sign(FIELDS)


def test_another_key_does_not_verify():
    assert not ApproverKey(os.urandom(32)).verifies(FIELDS, KEY.sign(FIELDS))


def test_signed_at_is_iso_utc_with_z():
    moment = datetime(2026, 12, 2, 14, 0, 0, 5, tzinfo=UTC)
    assert signed_at_text(moment) == "2026-12-02T14:00:00.000005Z"


def test_sign_answer_binds_the_answer_and_its_json_carries_the_signature():
    response = ToolApprovalResponse(call_id="c1", approved=True)
    now = datetime(2026, 12, 2, 14, tzinfo=UTC)
    signed = sign(
        KEY,
        response,
        workflow_id="agent-1",
        run_id="run-1",
        arguments_sha256=DIGEST,
        approver="alice",
        groups=["ops", "dev"],
        now=now,
    )
    data = signed.model_dump(mode="json")
    assert data["approver"] == "alice" and data["groups"] == ["dev", "ops"]
    assert data["run_id"] == "run-1" and data["arguments_sha256"] == DIGEST
    assert data["signed_at"] == "2026-12-02T14:00:00.000000Z"
    assert len(base64.b64decode(data["signature"])) == 32
    assert ToolApprovalResponse.model_validate(data) == signed
    fields = SignedFields("alice", ("dev", "ops"), "agent-1", "run-1", "c1", DIGEST, "approve",
                          data["signed_at"])  # fmt: skip
    assert KEY.verifies(fields, data["signature"])


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
        ({"signature": "A" * 43 + "="}, "a signature needs signed_at and approver"),
        ({"signed_at": "2026-12-02T14:00:00Z"}, "signed_at is only taken with a signature"),
        ({"signature": "not base64", "signed_at": "2026-12-02T14:00:00Z"}, "signature"),
        ({"signature": "A" * 43 + "=", "signed_at": "yesterday"}, "signed_at"),
        ({"groups": ["ops", "no spaces"]}, "groups"),
    ],
)
def test_a_malformed_signed_answer_is_refused(given, why):
    with pytest.raises(ValidationError, match=why):
        ToolApprovalResponse.model_validate(
            {"call_id": "c1", "approved": True, "approver": "ann", **given}
        )


async def test_the_verifier_says_why_it_refuses():
    signature = KEY.sign(FIELDS)
    request = VerifyRequest(**dataclasses.asdict(FIELDS), signature=signature)
    request = request.model_copy(update={"groups": list(FIELDS.groups)})
    assert (await AnswerVerifier(KEY).verify_answer(request)).valid
    forged = request.model_copy(update={"approver": "mallory"})
    refused = await AnswerVerifier(KEY).verify_answer(forged)
    assert not refused.valid and refused.problem == DOES_NOT_VERIFY
    no_key = await AnswerVerifier(None).verify_answer(request)
    assert not no_key.valid and no_key.problem == NO_KEY


@pytest.mark.parametrize(
    "value",
    ["short", base64.b64encode(b"x" * 31).decode(), base64.b64encode(b"x" * 33).decode(), "!!"],
)
def test_a_bad_approver_key_is_one_line_naming_the_variable(value):
    with pytest.raises(BadSetting) as caught:
        Settings.read({"AGENT_APPROVER_KEY": value})
    message = str(caught.value)
    assert message.startswith("AGENT_APPROVER_KEY") and "32 random bytes in base64" in message
    assert "\n" not in message and value not in message


def test_a_good_approver_key_reaches_the_worker_and_the_signers(tmp_path):
    raw = os.urandom(32)
    environ = {
        "AGENT_APPROVER_KEY": base64.b64encode(raw).decode(),
        "AGENT_WORKSPACE": str(tmp_path),
    }
    assert Settings.from_env(environ).approver_key == raw
    key = ApproverKey.from_env(environ)
    assert key is not None and ApproverKey(raw).verifies(FIELDS, key.sign(FIELDS))
    assert ApproverKey.from_env({}) is None


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
