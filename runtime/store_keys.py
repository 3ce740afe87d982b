"""Where a stored payload lives inside a store: the same layout for the file store as the SDK's S3
driver uses for its object keys, so an operator has one picture of both.

    v0/ns/{namespace}/wt/{workflow type}/wi/{workflow id}/ri/{run id}/d/sha256/{hex digest}
    v0/ns/{namespace}/at/{activity type}/ai/{activity id}/ri/{run id}/d/sha256/{hex digest}
    v0/ns/{namespace}/wh/{sha256 of the workflow id}/d/sha256/{hex digest}   (a long workflow id)
    v0/d/sha256/{hex digest}                      (no workflow or activity known)

Keys are content-addressed within a run (the same bytes share one object) and grouped by run,
so an operator can delete a run's payloads as one folder. Every segment is percent-encoded over
`A-Z a-z 0-9 - _` only: no `.`, so no segment can ever be `..` and no key can leave the store.
"""

from __future__ import annotations

import hashlib
import re
import string
from urllib.parse import unquote

from temporalio.converter import (
    StorageDriverActivityInfo,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

SAFE = frozenset(string.ascii_letters + string.digits + "-_")
MAX_SEGMENT_BYTES = 200
"""A longer segment (a long workflow id) drops the run's folders: file names stop at 255 bytes."""
KEY = re.compile(r"v0(/[A-Za-z0-9%_-]+)*/d/sha256/[0-9a-f]{64}")
RUN_SEGMENT = re.compile(r"/ri/([A-Za-z0-9%_-]+)/")
WORKFLOW_SEGMENT = re.compile(r"/wi/([^/]+)/")
WORKFLOW_HASH_SEGMENT = re.compile(r"/wh/([0-9a-f]{64})/")


def segment(value: str | None) -> str:
    """One path segment: `null` for nothing, else the UTF-8 bytes percent-encoded."""
    if not value:
        return "null"
    return "".join(chr(b) if chr(b) in SAFE else f"%{b:02X}" for b in value.encode("utf-8"))


def payload_key(context: StorageDriverStoreContext, digest: str) -> str:
    """The key of a payload whose SHA-256 is `digest`, stored for `context`'s workflow or
    activity."""
    tail = f"/d/sha256/{digest}"
    target = context.target
    if target is None:
        return f"v0{tail}"
    namespace = segment(target.namespace)
    if len(namespace) > MAX_SEGMENT_BYTES:
        return f"v0{tail}"
    scope = ""
    if isinstance(target, StorageDriverWorkflowInfo):
        parts = [("wt", target.type), ("wi", target.id), ("ri", target.run_id)]
    elif isinstance(target, StorageDriverActivityInfo):
        parts = [("at", target.type), ("ai", target.id), ("ri", target.run_id)]
    else:
        parts = []
    encoded = [(name, segment(value)) for name, value in parts]
    if all(len(value) <= MAX_SEGMENT_BYTES for _, value in encoded):
        scope = "".join(f"/{name}/{value}" for name, value in encoded)
    elif isinstance(target, StorageDriverWorkflowInfo) and target.id:
        scope = f"/wh/{_workflow_hash(target.id)}"  # the payload stays bound to its workflow
    return f"v0/ns/{namespace}{scope}{tail}"


def _workflow_hash(workflow_id: str) -> str:
    return hashlib.sha256(workflow_id.encode("utf-8")).hexdigest()


def stored_for(key: str, workflow_id: str) -> bool:
    """Whether `key` (of the file store or the S3 store) names `workflow_id` as the workflow it
    was stored for. A key that names no workflow belongs to none."""
    found = WORKFLOW_SEGMENT.search(key)
    if found is not None:
        return unquote(found.group(1)) == workflow_id
    hashed = WORKFLOW_HASH_SEGMENT.search(key)
    return hashed is not None and hashed.group(1) == _workflow_hash(workflow_id)


def is_key(text: str) -> bool:
    """Whether `text` is a key this layout makes (and so names a file inside the store)."""
    return KEY.fullmatch(text) is not None


def run_of(key: str) -> str | None:
    """The run id a key was stored under, when the key says (`null` and none: None)."""
    found = RUN_SEGMENT.search(key)
    if found is None or found.group(1) == "null":
        return None
    return unquote(found.group(1))
