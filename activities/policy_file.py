"""The worker's approval rules: `AGENT_POLICY_FILE`.

The file is JSON, `{"enforced": [rules], "defaults": [rules]}` (both optional). Enforced rules
come before every run's own rules, so no run loosens them; default rules apply where neither
decides. The worker reads the file once at start: a missing or invalid file is a `ValueError`
whose one-line message names the file, and the worker does not start.

Runs get the rules with the rest of the worker's setup (`worker_setup`): the workflow records
the result in its history, so a replay sees the same rules.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from workflows.contract.rules import WorkerPolicy
from workflows.intake import describe

POLICY_FILE_ENV = "AGENT_POLICY_FILE"
MAX_POLICY_FILE_BYTES = 1_000_000


def load_policy_file(path: Path) -> WorkerPolicy:
    """The rules in `path`; ValueError with a one-line reason naming the file."""
    where = f"{POLICY_FILE_ENV} {path}"
    try:
        size = path.stat().st_size
        if size > MAX_POLICY_FILE_BYTES:
            raise ValueError(f"{where}: {size} bytes, more than {MAX_POLICY_FILE_BYTES}")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{where}: a folder, not a file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8 text") from None
    except OSError as err:
        raise ValueError(f"{where}: cannot be read ({err.strerror or err})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f'{where}: must be a JSON object {{"enforced": [...], "defaults": [...]}},'
            f" got {type(data).__name__}"
        )
    try:
        return WorkerPolicy.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"{where}: invalid rules: {describe(err)}") from None


def worker_policy_from_env(environ: Mapping[str, str] | None = None) -> WorkerPolicy:
    """The rules `AGENT_POLICY_FILE` names, or none when it is unset or empty."""
    env = os.environ if environ is None else environ
    raw = (env.get(POLICY_FILE_ENV) or "").strip()
    if not raw:
        return WorkerPolicy()
    return load_policy_file(Path(raw).expanduser())


class PolicyActivities:
    """Serves the rules the worker loaded at start (never re-read: every run of this worker
    gets the same rules, and a bad edit of the file cannot break a running worker)."""

    def __init__(self, policy: WorkerPolicy) -> None:
        self._policy = policy

    @property
    def rules(self) -> WorkerPolicy:
        """The rules loaded at start (what `worker_setup` hands to runs and `execute_tool`
        re-checks its enforced ones from)."""
        return self._policy
