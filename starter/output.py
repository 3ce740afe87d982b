"""Where the command line writes: people get a transcript on stdout; with `--json`, stdout carries
only JSON (one object per line) and the remarks for people go to stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from starter.render import event_json, event_line, text_block, visible
from workflows.model import AgentEvent


class Output:
    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self._text_open = False

    def stream_text(self, piece: str) -> None:
        """The model's text as it is generated (human mode only; JSON output has the round's
        `text_delta` event instead)."""
        if self.json_mode or not piece:
            return
        if not self._text_open:
            print("assistant: ", end="")
            self._text_open = True
        print(text_block(piece), end="", flush=True)

    def end_text(self) -> None:
        """The model's text so far is a whole reply: the next output starts a line of its own."""
        self._end_text()

    def _end_text(self) -> None:
        if self._text_open:
            print(flush=True)
            self._text_open = False

    def event(self, event: AgentEvent) -> None:
        self._end_text()
        print(event_json(event) if self.json_mode else event_line(event), flush=True)

    def info(self, text: str) -> None:
        """A remark for people (stderr in JSON mode, so stdout stays parseable)."""
        self._end_text()
        print(text, file=sys.stderr if self.json_mode else sys.stdout, flush=True)

    def line(self, text: str) -> None:
        """Human output; nothing in JSON mode."""
        if not self.json_mode:
            self._end_text()
            print(text, flush=True)

    def data(self, obj: Any) -> None:
        """Machine output; nothing in human mode."""
        if self.json_mode:
            print(json.dumps(obj, ensure_ascii=False, default=str), flush=True)

    def error(self, text: str) -> None:
        """One line on stderr, whatever the message holds."""
        self._end_text()
        print(f"error: {visible(text)}", file=sys.stderr, flush=True)
