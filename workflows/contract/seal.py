"""Where a sealed payload belongs: the workflow, the first run and the role it was sealed for.

With encryption on, the codec writes a small record into every payload before sealing it
(metadata `agent-seal`, inside the ciphertext, so nobody without the key can write or change
it): the workflow id the payload was encoded for, and, from the project's own clients, the role
(`start`, `signal:NAME`, `update:NAME`) and the first run id of the workflow it was sent to.
The workflow reads the record of what it decoded and refuses a payload sealed for another
workflow, another run or another handler, as it refuses one that was not sealed at all: sealed
bytes copied out of one run's history into another grant nothing.

Pure: no I/O, safe inside the workflow sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

SEAL_METADATA = "agent-seal"
NO_SEAL = b"{}"
"""What the codec gives a payload it decrypted that carries no record (sealed by an older
release): decrypted, bound to nothing. A payload without the metadata at all was not sealed."""
START_ROLE = "start"
MAX_SEAL_BYTES = 4_096


def signal_role(name: str) -> str:
    return f"signal:{name}"


def update_role(name: str) -> str:
    return f"update:{name}"


@dataclass(frozen=True)
class Seal:
    """What a payload was sealed for. Empty `role` or `first_run_id`: not known to the program
    that sealed it (a client built on the data converter alone binds the workflow only)."""

    workflow_id: str
    role: str = ""
    first_run_id: str = ""

    def to_bytes(self) -> bytes:
        record = {"w": self.workflow_id}
        if self.role:
            record["r"] = self.role
        if self.first_run_id:
            record["f"] = self.first_run_id
        return json.dumps(record, separators=(",", ":")).encode()


def read_seal(metadata: Mapping[str, bytes]) -> Seal | None:
    """The seal record of a decoded payload, or None when it has none (or not a readable one)."""
    raw = metadata.get(SEAL_METADATA)
    if not raw or len(raw) > MAX_SEAL_BYTES:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    fields = [record.get("w"), record.get("r", ""), record.get("f", "")]
    if not all(isinstance(field, str) for field in fields) or not fields[0]:
        return None
    return Seal(workflow_id=fields[0], role=fields[1], first_run_id=fields[2])


UNBOUND = (
    "the payload was not sealed for this run (with encryption on, a payload is accepted only by"
    " the workflow, the run and the handler it was encrypted for)"
)


def was_sealed(metadata: Mapping[str, bytes]) -> bool:
    """Whether the codec decrypted this payload (with or without a record)."""
    return SEAL_METADATA in metadata


def seal_problem(
    metadata: Mapping[str, bytes],
    *,
    workflow_id: str,
    role: str,
    first_run_id: str | None,
) -> str | None:
    """Why a decoded payload may not be taken by this handler of this run, or None when it may.
    `first_run_id` None: the run is not known to the sender (a start), so it is not compared."""
    seal = read_seal(metadata)
    if seal is None or seal.workflow_id != workflow_id:
        return UNBOUND
    if seal.role and seal.role != role:
        return UNBOUND
    if first_run_id is not None and seal.first_run_id and seal.first_run_id != first_run_id:
        return UNBOUND
    return None
