"""The at-most-once records on the worker's disk: sealed with the encryption key when one is set,
opened by any configured key of the recorded id, never a second run when they cannot be opened,
and removed after the retention period."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from activities.markers import IdempotencyMarkers, interrupted_message
from runtime.codec import Keyring, parse_keys

OUTPUT = '{"ok": true, "data": {"stdout": "the-command-output-7f3a\\n"}}'


def keyring(*ids: str) -> Keyring:
    return Keyring(tuple((key_id, os.urandom(32)) for key_id in ids))


def done_once(markers: IdempotencyMarkers, call_id: str = "call_1") -> None:
    assert markers.claim("wf-1", call_id, "run_command", "run-1") is None
    markers.record("wf-1", call_id, "run_command", OUTPUT, "run-1")


def on_disk(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(folder.iterdir()))


def test_with_a_key_the_record_holds_no_plaintext_and_answers_the_retry(tmp_path: Path) -> None:
    keys = keyring("default")
    markers = IdempotencyMarkers(tmp_path, keys)
    done_once(markers)
    text = on_disk(tmp_path)
    assert "the-command-output-7f3a" not in text
    assert "wf-1" not in text and "run_command" not in text and "call_1" not in text
    [record] = [json.loads(p.read_text()) for p in tmp_path.iterdir()]
    assert set(record) == {"state", "sealed"} and record["state"] == "done"
    assert record["sealed"]["key_id"] == "default"
    # A retried attempt (a new worker with the same key) gets the recorded result back.
    again = IdempotencyMarkers(tmp_path, keys).claim("wf-1", "call_1", "run_command", "run-1")
    assert again == OUTPUT


def test_a_started_record_is_sealed_too_and_still_stops_a_second_run(tmp_path: Path) -> None:
    markers = IdempotencyMarkers(tmp_path, keyring("default"))
    assert markers.claim("wf-1", "call_1", "run_command") is None
    assert "wf-1" not in on_disk(tmp_path)
    assert markers.claim("wf-1", "call_1", "run_command") == interrupted_message("call_1")


def test_any_configured_key_of_the_recorded_id_opens_it_after_a_rotation(tmp_path: Path) -> None:
    old = keyring("old")
    done_once(IdempotencyMarkers(tmp_path, old))
    rotated = Keyring((("new", os.urandom(32)), *old.keys))
    assert IdempotencyMarkers(tmp_path, rotated).claim(
        "wf-1", "call_1", "run_command", "run-1"
    ) == (OUTPUT)


@pytest.mark.parametrize("reader", ["no key", "another key of the same id", "another key id"])
def test_a_record_that_cannot_be_opened_answers_as_an_interrupted_call(
    tmp_path: Path, reader: str
) -> None:
    done_once(IdempotencyMarkers(tmp_path, keyring("default")))
    keys = {"no key": None, "another key of the same id": keyring("default")}.get(
        reader, keyring("other")
    )
    answer = IdempotencyMarkers(tmp_path, keys).claim("wf-1", "call_1", "run_command", "run-1")
    assert answer == interrupted_message("call_1")  # never None: the call is not run again


def test_a_record_moved_to_another_call_s_file_does_not_open(tmp_path: Path) -> None:
    keys = keyring("default")
    markers = IdempotencyMarkers(tmp_path, keys)
    done_once(markers, "call_1")
    assert markers.claim("wf-1", "call_2", "run_command", "run-1") is None
    first, second = (markers._path("wf-1", c, "run-1") for c in ("call_1", "call_2"))
    second.write_text(first.read_text())  # someone with write access swaps the files
    assert markers.claim("wf-1", "call_2", "run_command", "run-1") == interrupted_message("call_2")


def test_without_a_key_records_stay_readable_as_before(tmp_path: Path) -> None:
    markers = IdempotencyMarkers(tmp_path)
    done_once(markers)
    [record] = [json.loads(p.read_text()) for p in tmp_path.iterdir()]
    assert record["content"] == OUTPUT and record["state"] == "done"
    # A record written before a key was set is still honoured once one is.
    later = IdempotencyMarkers(tmp_path, keyring("default"))
    assert later.claim("wf-1", "call_1", "run_command", "run-1") == OUTPUT


def test_records_past_their_retention_are_removed_at_start_and_from_time_to_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = IdempotencyMarkers(tmp_path, retention_days=30)
    done_once(markers, "call_old")
    done_once(markers, "call_new")
    old = markers._path("wf-1", "call_old", "run-1")
    month_ago = time.time() - 31 * 86_400
    os.utime(old, (month_ago, month_ago))
    stray = tmp_path / "leftover.tmp"
    stray.write_text("{}")
    os.utime(stray, (month_ago, month_ago))
    IdempotencyMarkers(tmp_path, retention_days=30)  # a worker starts: it sweeps
    assert not old.exists() and not stray.exists()
    assert markers._path("wf-1", "call_new", "run-1").exists()
    # From time to time: a claim more than an hour after the last sweep sweeps again.
    os.utime(markers._path("wf-1", "call_new", "run-1"), (month_ago, month_ago))
    monkeypatch.setattr("activities.markers.SWEEP_INTERVAL_SECONDS", -1.0)
    assert markers.claim("wf-1", "call_3", "run_command", "run-1") is None
    assert not markers._path("wf-1", "call_new", "run-1").exists()


def test_the_worker_s_records_use_its_encryption_keys(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    environ = {"AGENT_ENCRYPTION_KEY": key}
    markers = IdempotencyMarkers.for_worker(tmp_path, 30, environ)
    done_once(markers)
    assert "the-command-output-7f3a" not in on_disk(tmp_path)
    same = IdempotencyMarkers(tmp_path, parse_keys(environ))
    assert same.claim("wf-1", "call_1", "run_command", "run-1") == OUTPUT


def test_the_retention_is_a_setting(tmp_path: Path) -> None:
    from runtime.settings import Settings

    base = {"AGENT_WORKSPACE": str(tmp_path / "w")}
    assert Settings.from_env(base).state_retention_days == 30
    assert (
        Settings.from_env({**base, "AGENT_STATE_RETENTION_DAYS": "7.5"}).state_retention_days == 7.5
    )
    with pytest.raises(ValueError, match=r"^AGENT_STATE_RETENTION_DAYS must be a positive number"):
        Settings.from_env({**base, "AGENT_STATE_RETENTION_DAYS": "-1"})
