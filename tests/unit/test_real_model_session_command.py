"""The long real-model session's driver (`python -m bench.real_model_session`) says the exact
command that made its figures, every option with its value, first in what it prints and in its
`figures.json`: a report quotes what ran (a report once said `--file-bytes 1600` of figures made
with 2000). No model server needed: the figures of a session that played no turn."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from bench.real_model_session import Proxy, command_line, parse, report

OPTIONS = ("--llm-url", "--workdir", "--turns", "--max-rounds", "--file-bytes", "--window")


def test_the_command_names_every_option_with_its_value(tmp_path: Path) -> None:
    args = parse(["--workdir", str(tmp_path / "session"), "--file-bytes", "2000"])
    words = shlex.split(command_line(args))
    assert words[:3] == [".venv/bin/python", "-m", "bench.real_model_session"]
    assert [w for w in words if w.startswith("--")] == list(OPTIONS)
    assert words[words.index("--file-bytes") + 1] == "2000"
    assert words[words.index("--max-rounds") + 1] == "4"  # a default, said too
    assert parse(words[3:]) == args  # the same session again


async def test_the_figures_begin_with_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = command_line(parse(["--workdir", str(tmp_path), "--turns", "3"]))
    proxy = Proxy("http://127.0.0.1:9/v1")
    try:
        report(tmp_path, [], proxy, 3, command)
    finally:
        await proxy.aclose()
    assert capsys.readouterr().out.splitlines()[0] == f"command: {command}"
    assert json.loads((tmp_path / "figures.json").read_text())["command"] == command
