"""At-most-once execution of the tools that are not safe to retry: a marker file per scheduled
call, in the worker's state folder (outside the workspace)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from workflows.tool_results import envelope_error


def interrupted_message(call_id: str) -> str:
    return envelope_error(
        f"An earlier attempt of call '{call_id}' was interrupted before it reported a result; "
        "this tool is not safe to retry, so it was not run again (it may or may not have "
        "taken effect)."
    )


class IdempotencyMarkers:
    """At-most-once execution of tools that are not safe to retry, per scheduled call: the
    workflow id, the run key (the first run id of the run's continue-as-new chain) and the call
    id, which the workflow keeps unique within a run. A new call, in a later round, session turn,
    generation or a later run under the same workflow id, never meets an earlier call's record.

    A marker file (named by a hash of the key, in a state folder outside the workspace) is
    created, exclusively, before the tool runs; it records the result when the tool finishes.
    A second attempt finds the marker and does not run the tool again: it returns the recorded
    result, or, if the first attempt never finished, an error envelope saying so.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def _path(self, workflow_id: str, call_id: str, run_key: str | None) -> Path:
        parts = [workflow_id, call_id] if run_key is None else [workflow_id, run_key, call_id]
        key = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
        return self._folder / f"{key}.json"

    def claim(
        self, workflow_id: str, call_id: str, tool: str, run_key: str | None = None
    ) -> str | None:
        """Claim the key. None when claimed now; else the content to return instead of running."""
        self._folder.mkdir(parents=True, exist_ok=True)
        path = self._path(workflow_id, call_id, run_key)
        record = {"workflow_id": workflow_id, "call_id": call_id, "tool": tool, "state": "started"}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                previous = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                previous = {}
            if previous.get("state") == "done" and isinstance(previous.get("content"), str):
                return str(previous["content"])
            return interrupted_message(call_id)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        return None

    def record(
        self, workflow_id: str, call_id: str, tool: str, content: str, run_key: str | None = None
    ) -> None:
        path = self._path(workflow_id, call_id, run_key)
        record = {
            "workflow_id": workflow_id,
            "call_id": call_id,
            "tool": tool,
            "state": "done",
            "content": content,
        }
        fd, temporary = tempfile.mkstemp(dir=self._folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(temporary, path)
