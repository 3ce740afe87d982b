"""Encryption at rest, in-process: the keys from the environment, the AES-256-GCM codec, the one
data converter, failures with their messages and stack traces encrypted on the dev server, replay
of an encrypted history, and the log filter that turns the SDK's retried decryption failures into
one line per run."""

from __future__ import annotations

import base64
import logging
import os
import uuid

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from runtime.codec import (
    ENCODING,
    ENV_KEY,
    ENV_KEYS,
    KEY_ID_METADATA,
    DecryptionError,
    EncryptionCodec,
    KeyConfigError,
    Keyring,
    parse_keys,
)
from runtime.connect import data_converter
from runtime.decryption_log import WORKFLOW_LOGGER, DecryptionFailureFilter
from starter.errors import translate
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import start_run, wait_for_phase, worker_for
from workflows.model import AgentRunInput, ToolApprovalResponse
from workflows.run.agent import AgentWorkflow


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def keyring(*ids: str) -> Keyring:
    return Keyring(tuple((i, os.urandom(32)) for i in ids))


def plain(text_: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text_}"'.encode())


# --- keys ---------------------------------------------------------------------------------------


def test_one_key_has_the_id_default_and_a_list_puts_the_encrypting_key_first():
    one, two = new_key(), new_key()
    assert parse_keys({ENV_KEY: one}) == Keyring((("default", base64.b64decode(one)),))
    ring = parse_keys({ENV_KEYS: f"new:{two}, default:{one}"})
    assert ring is not None and ring.ids() == ["new", "default"] and ring.encrypting_id == "new"
    both = parse_keys({ENV_KEY: one, ENV_KEYS: f"k.2_x-Y:{two}"})
    assert both is not None and both.ids() == ["k.2_x-Y"], "AGENT_ENCRYPTION_KEYS wins"
    assert parse_keys({}) is None
    assert parse_keys({ENV_KEY: "", ENV_KEYS: " "}) is None


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({ENV_KEY: "c2hvcnQtc2VjcmV0"}, ENV_KEY),  # base64, but 12 bytes
        ({ENV_KEY: "not base64 at all!!"}, ENV_KEY),
        ({ENV_KEYS: "a:c2hvcnQtc2VjcmV0"}, ENV_KEYS),
        ({ENV_KEYS: "c2hvcnQtc2VjcmV0"}, ENV_KEYS),  # no key id
        ({ENV_KEYS: "bad id:c2hvcnQtc2VjcmV0"}, ENV_KEYS),
        ({ENV_KEYS: f"{'x' * 65}:c2hvcnQtc2VjcmV0"}, ENV_KEYS),
    ],
)
def test_a_bad_key_is_one_line_naming_the_variable_never_the_key(environ, names):
    with pytest.raises(KeyConfigError) as caught:
        parse_keys(environ)
    message = str(caught.value)
    assert names in message and "\n" not in message
    for value in environ.values():
        assert value.split(":")[-1] not in message
    with pytest.raises(ValueError):  # every program catches it as a bad setting
        data_converter(environ)


def test_a_key_id_may_appear_once():
    key = new_key()
    with pytest.raises(KeyConfigError, match="'a' appears twice"):
        parse_keys({ENV_KEYS: f"a:{key},a:{new_key()}"})


# --- the codec ----------------------------------------------------------------------------------


async def test_the_codec_seals_the_whole_payload_under_the_first_key():
    ring = keyring("new", "old")
    codec = EncryptionCodec(ring)
    original = plain("Please delete the logs folder")
    original.metadata["messageType"] = b"secret.Type"
    first, second = await codec.encode([original, original])
    assert dict(first.metadata) == {"encoding": ENCODING, KEY_ID_METADATA: b"new"}
    assert b"logs" not in first.data and b"secret.Type" not in first.data
    assert first.data != second.data, "a fresh nonce per payload"
    assert await codec.decode([first, second]) == [original, original]
    # A program that holds only the old key's successor list still reads old payloads.
    old_only = EncryptionCodec(Keyring((ring.keys[1],)))
    (under_old,) = await old_only.encode([original])
    assert (await codec.decode([under_old]))[0] == original


async def test_payloads_that_are_not_encrypted_decode_unchanged():
    codec = EncryptionCodec(keyring("default"))
    payloads = [plain("x"), Payload(metadata={"encoding": b"binary/null"})]
    assert await codec.decode(payloads) == payloads
    assert await EncryptionCodec(None).decode(payloads) == payloads


async def test_a_payload_under_a_key_the_program_lacks_names_the_key_id():
    (sealed,) = await EncryptionCodec(keyring("k2026")).encode([plain("x")])
    for lacking, why in [
        (EncryptionCodec(keyring("other")), "has the key ids other"),
        (EncryptionCodec(None), "has no key"),
        (EncryptionCodec(keyring("k2026")), "is a different key"),  # same id, another key
    ]:
        with pytest.raises(DecryptionError) as caught:
            await lacking.decode([sealed])
        assert caught.value.key_id == "k2026"
        assert "key id 'k2026'" in str(caught.value) and why in str(caught.value)
        assert not isinstance(caught.value, ApplicationError)


async def test_an_altered_payload_does_not_decrypt():
    codec = EncryptionCodec(keyring("default"))
    (sealed,) = await codec.encode([plain("x")])
    flipped = bytearray(sealed.data)
    flipped[-1] ^= 1
    tampered = Payload(metadata=sealed.metadata, data=bytes(flipped))
    relabelled = Payload(metadata={**sealed.metadata, KEY_ID_METADATA: b"other"}, data=sealed.data)
    with pytest.raises(DecryptionError, match="altered"):
        await codec.decode([tampered])
    with pytest.raises(DecryptionError, match="key id 'other'"):
        await codec.decode([relabelled])


# --- the data converter -------------------------------------------------------------------------


async def test_without_a_key_payloads_and_failures_are_written_as_before():
    converter = data_converter({})
    value = ToolApprovalResponse(call_id="call_1", approved=True, approver="ann")
    assert await converter.encode([value]) == await pydantic_data_converter.encode([value])
    assert type(converter.failure_converter) is DefaultFailureConverter
    assert issubclass(
        converter.payload_converter_class, pydantic_data_converter.payload_converter_class
    )


async def test_with_a_key_values_round_trip_encrypted():
    converter = data_converter({ENV_KEY: new_key()})
    value = ToolApprovalResponse(call_id="call_1", approved=True, approver="ann")
    (payload,) = await converter.encode([value])
    assert payload.metadata["encoding"] == ENCODING
    assert b"ann" not in payload.SerializeToString()
    assert await converter.decode([payload], [ToolApprovalResponse]) == [value]


async def test_the_session_converter_follows_the_encrypt_option(client, encrypted):
    """`pytest --encrypt` runs the suite with encryption on: the fixtures' client encrypts."""
    (payload,) = await client.data_converter.encode(["x"])
    assert (payload.metadata["encoding"] == ENCODING) is encrypted


# --- on the dev server --------------------------------------------------------------------------


def keyed_client(client: Client, environ: dict[str, str]) -> Client:
    return Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(environ)
    )


async def test_failure_messages_and_stack_traces_are_encrypted(client, task_queue):
    environ = {ENV_KEY: new_key()}
    keyed = keyed_client(client, environ)
    secret = "the model server said: token sk-very-secret-123 is invalid"
    fake = FakeAgentActivities(replies=[ApplicationError(secret, non_retryable=True)])
    async with worker_for(keyed, task_queue, fake):
        handle = await start_run(keyed, task_queue, AgentRunInput.from_prompt("hello"))
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.finish_reason == "error" and secret in (result.error or "")
    failed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert failed, [EventType.Name(e.event_type) for e in history.events]
    failure = failed[0].activity_task_failed_event_attributes.failure
    assert failure.message == "Encoded failure" and failure.stack_trace == ""
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING
    raw = b"".join(e.SerializeToString() for e in history.events)
    assert b"sk-very-secret" not in raw and b"hello" not in raw
    # The key's holder reads the failure back.
    decoded = await keyed.data_converter.decode_failure(failure)
    assert secret in str(decoded)


async def test_an_encrypted_history_replays_with_the_key_and_names_it_without(client, task_queue):
    environ = {ENV_KEYS: f"k1:{new_key()}"}
    keyed = keyed_client(client, environ)
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("deleted")]
    )
    async with worker_for(keyed, task_queue, fake):
        handle = await start_run(keyed, task_queue, AgentRunInput.from_prompt("delete logs"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.execute_update(
            "submit_approval", ToolApprovalResponse(call_id="call_1", approved=True)
        )
        await handle.result()
        history = await handle.fetch_history()
    with_key = Replayer(workflows=[AgentWorkflow], data_converter=data_converter(environ))
    assert (
        await with_key.replay_workflow(history, raise_on_replay_failure=False)
    ).replay_failure is None
    without = Replayer(workflows=[AgentWorkflow], data_converter=data_converter({}))
    result = await without.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "key id 'k1'" in str(result.replay_failure)


# --- the worker's log ---------------------------------------------------------------------------


def _activation_failure(run_id: str, err: BaseException) -> logging.LogRecord:
    try:
        raise RuntimeError("Failed decoding arguments") from err
    except RuntimeError as wrapped:
        return logging.LogRecord(
            WORKFLOW_LOGGER,
            logging.ERROR,
            __file__,
            1,
            "Failed handling activation on workflow with run ID %s",
            (run_id,),
            (type(wrapped), wrapped, wrapped.__traceback__),
        )


def test_the_log_has_one_line_per_run_naming_the_key_id():
    keep = DecryptionFailureFilter()
    lacking = DecryptionError("k9", "cannot decrypt a payload encrypted with key id 'k9': …")
    runs = [str(uuid.uuid4()) for _ in range(2)]
    records = [_activation_failure(r, lacking) for r in [runs[0], runs[0], runs[1], runs[0]]]
    passed = [r for r in records if keep.filter(r)]
    assert [r.getMessage().split()[1] for r in passed] == runs
    for record in passed:
        assert "key id 'k9'" in record.getMessage() and record.exc_info is None
        assert "\n" not in logging.Formatter().format(record)
    other = _activation_failure(runs[0], ValueError("not ours"))
    assert keep.filter(other) and other.exc_info is not None, "other failures pass untouched"


def test_the_starter_says_which_key_is_missing_even_when_the_sdk_wraps_the_error():
    lacking = DecryptionError("k9", "cannot decrypt a payload encrypted with key id 'k9': …")
    try:
        try:
            raise lacking
        except DecryptionError as err:
            raise RuntimeError("Failed decoding the query result") from err
    except RuntimeError as wrapped:
        failure = translate(wrapped, workflow_id="w", namespace="default")
    assert failure.message == str(lacking) and failure.code == 1
