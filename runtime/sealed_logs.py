"""The worker's log without run content when encryption is on.

The SDK logs a failed activity attempt and a failed workflow task with the exception (`Completing
activity as failed`, `Failed activation`), and an exception's message may quote the run: a
provider's error quoting the prompt, a body that is not a chat completion, a refused answer.
With a key (and without `AGENT_TRACE_CONTENT=true`), `seal_logged_failures` makes every log
record print its exception as where it was raised and its type only; the message travels sealed
in the run's history (the failure converter encrypts it), where a key holder reads it.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

SEALED = "(message sealed: encryption is on)"

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def sealed_exception_text(exc_info: ExcInfo) -> str:
    """The traceback of `exc_info` with its type (and an ApplicationError's `type`), never its
    message."""
    kind, error, tb = exc_info
    frames = "".join(traceback.format_tb(tb)) if tb is not None else ""
    name = f"{kind.__module__}.{kind.__qualname__}"
    error_type = getattr(error, "type", None)
    if isinstance(error_type, str) and error_type:
        name = f"{name} ({error_type[:80]})"
    return f"Traceback (most recent call last):\n{frames}{name}: {SEALED}"


_installed = False


def seal_logged_failures(environ: Mapping[str, str]) -> bool:
    """With encryption on and no AGENT_TRACE_CONTENT=true, every log record made from now on
    carries its exception's type and traceback only; whether that is now the case."""
    global _installed
    from runtime.tracing import content_sealed

    if not content_sealed(environ):
        return False
    if _installed:
        return True
    previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        info = record.exc_info
        if info and info[0] is not None and info[1] is not None:
            # The formatter prints `exc_text` when it is set; `exc_info` stays for the filters
            # that turn a known failure into one line (runtime.decryption_log, store_log).
            record.exc_text = sealed_exception_text((info[0], info[1], info[2]))
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
    return True
