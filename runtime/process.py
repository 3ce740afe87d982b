"""How every entry point of the project ends.

A process that used a Temporal client can crash (SIGSEGV/SIGABRT) while the interpreter shuts
down, after all its work is done, when the SDK's Rust core is torn down (a known SDK problem).
That would replace the exit code, so every entry point flushes its output (and the spans still
waiting to be exported, `runtime.tracing`) and leaves with `os._exit`: the code is then always
its own.
"""

from __future__ import annotations

import os
import sys
from contextlib import suppress
from typing import NoReturn

from runtime.tracing import flush_traces


def exit_now(code: int) -> NoReturn:
    flush_traces()
    with suppress(Exception):
        sys.stdout.flush()
    with suppress(Exception):
        sys.stderr.flush()
    os._exit(code)
