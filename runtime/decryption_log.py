"""One log line per run for payloads the worker cannot decrypt.

A workflow activation that cannot be decoded fails its workflow task; Temporal retries the task
for as long as the run is open, and the SDK logs a traceback on every attempt. The run stays open
(neither failed nor completed), which is right: the cure is to give the worker the key. This
filter turns the first such failure of each run into one line naming the key id and drops the
repeats.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from runtime.codec import find_decryption_error

WORKFLOW_LOGGER = "temporalio.worker._workflow"
REMEMBERED_RUNS = 10_000


class DecryptionFailureFilter(logging.Filter):
    """Lets through the first decryption failure per run id (as one line), drops the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: OrderedDict[str, None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        failure = find_decryption_error(exc)
        if failure is None:
            return True
        run_id = str(record.args[0]) if isinstance(record.args, tuple) and record.args else "?"
        if run_id in self._seen:
            return False
        self._seen[run_id] = None
        if len(self._seen) > REMEMBERED_RUNS:
            self._seen.popitem(last=False)
        record.msg = "run %s waits for its key (the run stays open, its task is retried): %s"
        record.args = (run_id, failure)
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.ERROR, "ERROR"
        return True


def log_decryption_failures_once() -> DecryptionFailureFilter:
    """Install the filter on the SDK's workflow-worker logger (once; later calls reuse it)."""
    logger = logging.getLogger(WORKFLOW_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, DecryptionFailureFilter):
            return existing
    installed = DecryptionFailureFilter()
    logger.addFilter(installed)
    return installed
