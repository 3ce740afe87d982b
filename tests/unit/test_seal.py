"""The seal record: the real codec with a key writes it inside the ciphertext for the workflow of
its serialization context and the role and run a client names; `seal_problem` refuses a payload
sealed for another workflow, run or handler, or sealed by an earlier release."""

from __future__ import annotations

import base64
import os

from temporalio.api.common.v1 import Payload
from temporalio.converter import WorkflowSerializationContext

from runtime.codec import EncryptionCodec, parse_keys, sealed_for
from workflows.contract.seal import SEAL_METADATA, UNBOUND, Seal, seal_problem, signal_role

KEYS = parse_keys({"AGENT_ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode()})


def sealed(workflow_id: str, seal: Seal | None = None) -> Payload:
    codec = EncryptionCodec(KEYS, mark_plaintext=True).with_context(
        WorkflowSerializationContext(namespace="default", workflow_id=workflow_id)
    )
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b"{}")
    if seal is None:
        return codec.decrypt(codec.encrypt(plain))
    with sealed_for(seal):
        return codec.decrypt(codec.encrypt(plain))


def problem(payload: Payload, workflow_id: str, role: str, first_run: str | None) -> str | None:
    return seal_problem(
        payload.metadata, workflow_id=workflow_id, role=role, first_run_id=first_run
    )


def test_a_payload_is_taken_only_where_it_was_sealed_for() -> None:
    cancel = signal_role("cancel")
    payload = sealed("w1", Seal("w1", cancel, "run-1"))
    assert problem(payload, "w1", cancel, "run-1") is None
    assert problem(payload, "w2", cancel, "run-1") == UNBOUND  # another workflow
    assert problem(payload, "w1", cancel, "run-2") == UNBOUND  # another run of that id
    assert problem(payload, "w1", signal_role("send_message"), "run-1") == UNBOUND  # handler


def test_without_a_client_role_the_workflow_still_binds() -> None:
    payload = sealed("w1")
    assert problem(payload, "w1", "start", None) is None
    assert problem(payload, "w2", "start", None) == UNBOUND


def test_a_payload_of_an_earlier_release_or_a_forged_plaintext_record_binds_nothing() -> None:
    codec = EncryptionCodec(KEYS, mark_plaintext=True)
    old = codec.decrypt(codec.encrypt(Payload(metadata={"encoding": b"json/plain"}, data=b"1")))
    assert problem(old, "w1", "start", None) == UNBOUND
    forged = Payload(
        metadata={"encoding": b"json/plain", SEAL_METADATA: Seal("w1", "start").to_bytes()},
        data=b"{}",
    )
    assert SEAL_METADATA not in codec.decrypt(forged).metadata  # read only from ciphertext
