"""The payload store's setting, budget, keys, file driver, failures and log line: the real file
system, the real data converter, no Temporal server."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from runtime.codec import ENCODING, ENV_KEY
from runtime.connect import data_converter
from runtime.file_store import FileStorageDriver
from runtime.payload_store import (
    ENV_MAX_CONVERSATION_MB,
    ENV_S3_ENDPOINT,
    ENV_STORE,
    PayloadStoreConfigError,
    conversation_budget_bytes,
    external_storage,
    is_reference,
    parse_store,
    resolve_references,
    store_driver,
    too_large_hint,
)
from runtime.s3_store import Boto3S3Client
from runtime.setting_error import SettingError
from runtime.store_failure import GuardedDriver, PayloadStoreError
from runtime.store_keys import is_key, payload_key, run_of, segment
from runtime.store_log import ACTIVITY_LOGGER, WORKFLOW_LOGGER, StoreFailureFilter
from workflows.bounds import MAX_CONVERSATION_BYTES

BIG = "conversation " * 30_000  # 390 KB


def store_env(folder: Path, **extra: str) -> dict[str, str]:
    return {ENV_STORE: folder.as_uri(), **extra}


def files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


# --- the setting ---------------------------------------------------------------------------------


def test_the_setting_parses_both_kinds(tmp_path: Path) -> None:
    assert parse_store({}) is None and parse_store({ENV_STORE: "  "}) is None
    local = parse_store(store_env(tmp_path))
    assert local is not None and local.kind == "file" and local.path == tmp_path
    spaced = tmp_path / "a folder"
    spaced.mkdir()
    assert parse_store({ENV_STORE: spaced.as_uri()}).path == spaced  # type: ignore[union-attr]
    s3 = parse_store({ENV_STORE: "s3://my-bucket/agent/payloads/", ENV_S3_ENDPOINT: "http://h:9"})
    assert s3 is not None and (s3.kind, s3.bucket, s3.prefix) == (
        "s3",
        "my-bucket",
        "agent/payloads/",
    )
    assert s3.endpoint_url == "http://h:9"
    bare = parse_store({ENV_STORE: "s3://my-bucket"})
    assert bare is not None and bare.prefix == "" and bare.endpoint_url is None


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("ftp://host/x", "not file:///PATH or s3://BUCKET/PREFIX"),
        ("/just/a/path", "not file:///PATH or s3://BUCKET/PREFIX"),
        ("file://server/share", "absolute path on this machine"),
        ("file:///", "absolute path of a folder"),
        ("file:///no/such/folder/here", "does not exist"),
        ("s3://UPPER/x", "bucket name"),
        ("s3://a/x", "bucket name"),
        ("s3://my-bucket/x?region=eu", "no ?query"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(value: str, needle: str) -> None:
    with pytest.raises(PayloadStoreConfigError) as caught:
        data_converter({ENV_STORE: value})
    message = str(caught.value)
    assert message.startswith(f"{ENV_STORE}=") and needle in message and "\n" not in message
    assert isinstance(caught.value, SettingError)  # what the worker and the starter catch


def test_a_bad_endpoint_is_named() -> None:
    with pytest.raises(PayloadStoreConfigError, match=f"^{ENV_S3_ENDPOINT}="):
        data_converter({ENV_STORE: "s3://my-bucket", ENV_S3_ENDPOINT: "localhost:9000"})


def test_the_budget_follows_the_store(tmp_path: Path) -> None:
    assert conversation_budget_bytes({}) == MAX_CONVERSATION_BYTES == 1_400_000
    assert conversation_budget_bytes(store_env(tmp_path)) == 64_000_000
    assert conversation_budget_bytes(store_env(tmp_path, **{ENV_MAX_CONVERSATION_MB: "128"})) == (
        128_000_000
    )
    assert conversation_budget_bytes(store_env(tmp_path, **{ENV_MAX_CONVERSATION_MB: "0.5"})) == (
        500_000
    )
    with pytest.raises(
        PayloadStoreConfigError, match=f"^{ENV_MAX_CONVERSATION_MB} needs {ENV_STORE}"
    ):
        conversation_budget_bytes({ENV_MAX_CONVERSATION_MB: "64"})
    assert ENV_STORE in too_large_hint({}) and ENV_MAX_CONVERSATION_MB in too_large_hint(
        store_env(tmp_path)
    )
    for bad in ("0", "-3", "lots", "2048", "nan"):
        with pytest.raises(PayloadStoreConfigError, match=f"^{ENV_MAX_CONVERSATION_MB}="):
            conversation_budget_bytes(store_env(tmp_path, **{ENV_MAX_CONVERSATION_MB: bad}))


# --- the converter -------------------------------------------------------------------------------


async def test_a_big_payload_goes_to_the_store_and_history_gets_a_reference(
    tmp_path: Path,
) -> None:
    converter = data_converter(store_env(tmp_path))
    (small,) = await converter.encode(["small"])
    assert not is_reference(small) and files(tmp_path) == []
    (reference,) = await converter.encode([BIG])
    assert is_reference(reference) and reference.ByteSize() < 1000
    (stored,) = files(tmp_path)
    assert b"conversation conversation" in stored.read_bytes()  # no key: stored as it is
    assert await converter.decode([reference], [str]) == [BIG]
    assert data_converter({}).external_storage is None


async def test_with_a_key_the_store_only_ever_gets_sealed_payloads(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    converter = data_converter(store_env(tmp_path, **{ENV_KEY: key}))
    (reference,) = await converter.encode([BIG])
    assert is_reference(reference)
    (stored,) = files(tmp_path)
    data = stored.read_bytes()
    assert b"conversation" not in data
    sealed = Payload()
    sealed.ParseFromString(data)
    assert sealed.metadata["encoding"] == ENCODING
    assert await converter.decode([reference], [str]) == [BIG]
    # Without the key the store's bytes stay sealed: the reference resolves, the payload does not.
    with pytest.raises(Exception, match="cannot decrypt"):
        await data_converter(store_env(tmp_path)).decode([reference], [str])


async def test_the_codec_server_s_resolution_reads_a_reference(tmp_path: Path) -> None:
    converter = data_converter(store_env(tmp_path))
    (reference,) = await converter.encode([BIG])
    (inline,) = await converter.encode(["inline"])
    storage = external_storage(store_env(tmp_path))
    assert storage is not None
    resolved = await resolve_references(storage, [reference, inline])
    assert resolved[1] == inline and not is_reference(resolved[0])
    assert converter.payload_converter.from_payloads([resolved[0]], [str]) == [BIG]
    other = tmp_path / "other"
    other.mkdir()
    foreign = Payload()
    foreign.CopyFrom(reference)
    foreign.data = reference.data.replace(b"agent.file", b"elsewhere")
    with pytest.raises(PayloadStoreError, match="driver 'elsewhere'"):
        await resolve_references(storage, [foreign])


# --- keys ----------------------------------------------------------------------------------------


def test_keys_never_leave_the_store() -> None:
    assert segment("..") == "%2E%2E" and segment("a/b") == "a%2Fb" and segment(None) == "null"
    assert segment("ünï") == "%C3%BCn%C3%AF"
    digest = "ab" * 32
    target = StorageDriverWorkflowInfo(namespace="default", id="../../etc", run_id="R1", type="T")
    key = payload_key(StorageDriverStoreContext(target=target), digest)
    assert key == f"v0/ns/default/wt/T/wi/%2E%2E%2F%2E%2E%2Fetc/ri/R1/d/sha256/{digest}"
    assert is_key(key) and run_of(key) == "R1"
    assert payload_key(StorageDriverStoreContext(), digest) == f"v0/d/sha256/{digest}"
    long_id = StorageDriverWorkflowInfo(namespace="default", id="w" * 300, run_id="R", type="T")
    # A workflow id too long for a file name is named by its SHA-256: still bound to it.
    bound = hashlib.sha256(b"w" * 300).hexdigest()
    assert payload_key(StorageDriverStoreContext(target=long_id), digest) == (
        f"v0/ns/default/wh/{bound}/d/sha256/{digest}"
    )
    for forged in ("../x", f"v0/../d/sha256/{digest}", f"/v0/d/sha256/{digest}", "v0/d/sha256/x"):
        assert not is_key(forged), forged


# --- the file driver and its failures ------------------------------------------------------------


def workflow_context(run_id: str = "run-1") -> StorageDriverStoreContext:
    return StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id="W", run_id=run_id, type="T")
    )


async def test_the_file_driver_writes_once_and_checks_what_it_reads(tmp_path: Path) -> None:
    driver = GuardedDriver(FileStorageDriver(tmp_path), tmp_path.as_uri())
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"x"' * 1000)
    (claim,) = await driver.store(workflow_context(), [payload])
    path = tmp_path / claim.claim_data["path"]
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.is_file() and claim.claim_data["path"].startswith(
        "v0/ns/default/wt/T/wi/W/ri/run-1/"
    )
    os.utime(path, (0, 0))
    (again,) = await driver.store(workflow_context(), [payload])  # the same bytes: the same file
    assert again == claim and path.stat().st_mtime > 0 and len(files(tmp_path)) == 1
    assert await driver.retrieve(StorageDriverRetrieveContext(), [claim]) == [payload]

    path.write_bytes(path.read_bytes()[:-1] + b"!")
    with pytest.raises(PayloadStoreError) as caught:
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    assert caught.value.run_id == "run-1"
    assert "could not give back a payload" in str(caught.value) and "SHA-256" in str(caught.value)

    forged = StorageDriverClaim(claim_data={**claim.claim_data, "path": "../../etc/passwd"})
    with pytest.raises(PayloadStoreError, match="not a key of this store"):
        await driver.retrieve(StorageDriverRetrieveContext(), [forged])


async def test_a_missing_store_folder_fails_and_is_not_created(tmp_path: Path) -> None:
    folder = tmp_path / "mounted"
    folder.mkdir()
    driver = store_driver(parse_store(store_env(folder)), {})  # type: ignore[arg-type]
    payload = Payload(data=b"y" * 100)
    (claim,) = await driver.store(workflow_context("run-2"), [payload])
    folder.rename(tmp_path / "unmounted")
    with pytest.raises(PayloadStoreError) as stored:
        await driver.store(workflow_context("run-2"), [Payload(data=b"z")])
    assert stored.value.run_id == "run-2" and "does not exist" in str(stored.value)
    with pytest.raises(PayloadStoreError, match="does not exist"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    assert not folder.exists()


async def test_the_s3_client_reads_and_writes_only_its_own_bucket() -> None:
    client = Boto3S3Client("mine", "agent/", "http://127.0.0.1:9", {})
    with pytest.raises(ValueError, match="names the bucket 'theirs'"):
        await client.get_object(bucket="theirs", key="v0/d/sha256/x")
    with pytest.raises(ValueError, match="names the bucket 'theirs'"):
        await client.put_object(bucket="theirs", key="v0/d/sha256/x", data=b"")


# --- one log line per run ------------------------------------------------------------------------


def failure_record(logger: str, run_id: str, **extra: object) -> logging.LogRecord:
    try:
        try:
            raise PayloadStoreError(
                "payload store s3://b could not give back a payload: down", None
            )
        except PayloadStoreError as inner:
            raise RuntimeError("Failed decoding arguments") from inner
    except RuntimeError as err:
        record = logging.LogRecord(
            logger,
            logging.WARNING,
            __file__,
            1,
            "Failed handling activation on workflow with run ID %s",
            (run_id,),
            (type(err), err, err.__traceback__),
        )
    for name, value in extra.items():
        setattr(record, name, value)
    return record


def test_the_worker_logs_a_failing_store_once_per_run() -> None:
    one = StoreFailureFilter()
    first = failure_record(WORKFLOW_LOGGER, "R1")
    assert one.filter(first)
    assert first.getMessage() == (
        "run R1 waits for the payload store (the run stays open, its workflow task is retried):"
        " payload store s3://b could not give back a payload: down"
    )
    assert first.exc_info is None and first.levelname == "ERROR"
    assert not one.filter(failure_record(WORKFLOW_LOGGER, "R1"))  # the retry: dropped
    activity = failure_record(ACTIVITY_LOGGER, "x", temporal_activity={"workflow_run_id": "R2"})
    assert one.filter(activity) and activity.getMessage().startswith("run R2 waits")
    assert not one.filter(
        failure_record(ACTIVITY_LOGGER, "x", temporal_activity={"workflow_run_id": "R1"})
    )
    unrelated = logging.LogRecord(
        WORKFLOW_LOGGER, logging.WARNING, __file__, 1, "other %s", ("R1",), None
    )
    assert one.filter(unrelated) and unrelated.getMessage() == "other R1"
