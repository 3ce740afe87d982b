"""A small MCP server of our own, on the `mcp` SDK, for the tests and the benchmark.

    python -m tests.mcp_server stdio
    python -m tests.mcp_server http --port 8931      # streamable HTTP at http://127.0.0.1:8931/mcp

Tools: `echo` (read-only, structured result), `environment` (read-only: the names of the
variables it was started with), `pid` (read-only), `wait` (read-only: sleeps, for cancellation),
`look` (read-only: a file's text, or why it cannot be read), `surroundings` (read-only: its
working directory, HOME and network interfaces),
`note` (no annotations: writes a line to the file named by NOTES_FILE, so it needs approval),
`crash` (like `note`, then the server dies before it answers),
`fail` (read-only, always `isError`), and `odd.name/with spaces` (a name the model cannot take
as it is).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)

server = MCPServer("durable-agent-tests")


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> dict[str, Any]:
    """Echo the text back, with its length."""
    return {"text": text, "length": len(text)}


@server.tool(annotations=READ_ONLY, structured_output=False)
def environment() -> str:
    """The names of the environment variables this server was started with, one per line."""
    return "\n".join(sorted(os.environ))


@server.tool(annotations=READ_ONLY, structured_output=False)
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool(annotations=READ_ONLY, structured_output=False)
def look(path: str) -> str:
    """The text of a file, or the reason it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return f"cannot read: {err.strerror}"


@server.tool(annotations=READ_ONLY)
def surroundings() -> dict[str, Any]:
    """Where this server runs: its working directory, HOME, and its network interfaces."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return {
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME", ""),
        "interfaces": sorted(line.split(":")[0].strip() for line in lines),
    }


@server.tool(annotations=READ_ONLY, structured_output=False)
async def wait(seconds: float) -> str:
    """Sleep for a while, then say so."""
    await asyncio.sleep(seconds)
    return f"waited {seconds:g} s"


@server.tool(structured_output=False)
def note(line: str) -> str:
    """Append a line to the notes file."""
    path = Path(os.environ["NOTES_FILE"])
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return f"noted in {path.name}"


@server.tool(structured_output=False)
def crash(line: str) -> str:
    """Append a line to the notes file, then die before answering."""
    note(line)
    os._exit(1)


@server.tool(annotations=READ_ONLY)
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(reason)


@server.tool(name="odd.name/with spaces", annotations=READ_ONLY, structured_output=False)
def odd() -> str:
    """A tool whose name has characters a model's tool name may not."""
    return "odd"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
        return
    print(f"listening on http://127.0.0.1:{args.port}/mcp", flush=True)
    sys.stdout.flush()
    server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
