"""Run a command with a pseudo-terminal as its controlling terminal, answering each prompt that
ends with `:` with the next line given; prints `{"code": …, "output": …}`. It runs as its own
(single-threaded) process, since forking the multi-threaded test process is not safe:

    python -m tests.web.tty_driver '["answer 1", "answer 2"]' COMMAND ARG…
"""

from __future__ import annotations

import json
import os
import pty
import select
import sys
import time


def drive(command: list[str], answers: list[str], seconds: float = 60.0) -> tuple[int, str]:
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(command[0], command)
    output = b""
    asked_at = 0  # a prompt is looked for only in what came after the last answer
    pending = list(answers)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if pending and output[asked_at:].rstrip().endswith(b":"):
            os.write(fd, pending.pop(0).encode() + b"\n")
            asked_at = len(output)
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


if __name__ == "__main__":
    code, text = drive(sys.argv[2:], json.loads(sys.argv[1]))
    print(json.dumps({"code": code, "output": text}))
