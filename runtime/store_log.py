"""One log line per run for a payload store that fails.

A workflow task that cannot store or read a payload fails, and Temporal retries it for as long as
the run is open; an activity attempt that cannot fails, and its retry policy retries it. The SDK
logs a traceback on every attempt. This filter turns the first such failure of each run into
one line naming the store and the cause, and drops the repeats: a store that is down for an
hour costs one line per run, not one per retry.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping

from runtime.store_failure import find_store_error

WORKFLOW_LOGGER = "temporalio.worker._workflow"
ACTIVITY_LOGGER = "temporalio.activity"
REMEMBERED_RUNS = 10_000


def _activity_run(record: logging.LogRecord) -> str | None:
    details = getattr(record, "temporal_activity", None)
    if isinstance(details, Mapping):
        run = details.get("workflow_run_id")
        return str(run) if run else None
    return None


class StoreFailureFilter(logging.Filter):
    """Lets through the first store failure per run id (as one line), drops the rest. One
    instance serves both SDK loggers, so a run gets one line whichever side failed first."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: OrderedDict[str, None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        failure = find_store_error(exc)
        if failure is None:
            return True
        if record.name == WORKFLOW_LOGGER and isinstance(record.args, tuple) and record.args:
            run_id, what = str(record.args[0]), "its workflow task is retried"
        else:
            run_id = _activity_run(record) or failure.run_id or "?"
            what = "its activity is retried"
        if run_id in self._seen:
            return False
        self._seen[run_id] = None
        if len(self._seen) > REMEMBERED_RUNS:
            self._seen.popitem(last=False)
        record.msg = "run %s waits for the payload store (the run stays open, %s): %s"
        record.args = (run_id, what, failure)
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.ERROR, "ERROR"
        return True


def log_store_failures_once() -> StoreFailureFilter:
    """Install the filter on the SDK's workflow-worker and activity loggers (once; later calls
    reuse it)."""
    loggers = [logging.getLogger(WORKFLOW_LOGGER), logging.getLogger(ACTIVITY_LOGGER)]
    for existing in loggers[0].filters:
        if isinstance(existing, StoreFailureFilter):
            return existing
    installed = StoreFailureFilter()
    for logger in loggers:
        logger.addFilter(installed)
    return installed
