"""The run page's status line reads as words apart: `finished stop round 2`, not `stopround 2`
(the template's blocks ate the space between the finish reason and the round)."""

from __future__ import annotations

import re

import pytest

from starter.web.app import _templates
from workflows.model import AgentStatus


def _words(html: str) -> str:
    # Text nodes side by side as a browser joins them: only the space the HTML holds separates.
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


@pytest.mark.parametrize(
    ("status", "seen"),
    [
        (
            AgentStatus(phase="finished", round=2, pending_approvals=[], finish_reason="stop"),
            "finished stop round 2",
        ),
        (
            AgentStatus(phase="running", round=1, pending_approvals=[], cancel_requested=True),
            "running cancel requested round 1",
        ),
        (
            AgentStatus(
                phase="finished",
                round=3,
                pending_approvals=[],
                finish_reason="cancelled",
                cancel_requested=True,
            ),
            "finished cancelled round 3",
        ),
    ],
)
def test_the_status_line_keeps_its_words_apart(status, seen):
    html = _templates().get_template("_phase.html").render(status=status, closed=None)
    assert _words(html) == seen
