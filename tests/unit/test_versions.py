"""The rules a run follows by its patch markers (`workflows.versions`): the newest patch's
behaviour is on for new runs only, so a run recorded with `loop-cost-2` as its newest marker
replays (and goes on) as it was recorded. The replay of every recorded history is
tests/workflow/test_replay.py; the behaviours are tested with a real worker in
tests/workflow/test_session_outage.py and tests/cli/test_starter_audit_remembered.py."""

from __future__ import annotations

from dataclasses import fields

from workflows.versions import PATCHES, SESSIONS_OUTLIVE_OUTAGES, Rules

NEW = {"outage_ends_turn", "audit_remembered_rejections"}


def test_the_newest_patch_is_the_last_line_of_the_table():
    newest = PATCHES[-1]
    assert newest.id == SESSIONS_OUTLIVE_OUTAGES == "sessions-outlive-outages-1"
    assert newest.release == "1.0"
    assert all(p.open_until <= newest.open_until for p in PATCHES)


def test_only_new_runs_end_a_turn_on_an_outage_and_audit_a_remembered_no():
    now, before = Rules.this_release(), Rules.loop_cost_2()
    assert all(getattr(now, name) for name in NEW)
    assert not any(getattr(before, name) for name in NEW)
    changed = {f.name for f in fields(Rules) if getattr(now, f.name) != getattr(before, f.name)}
    assert changed == NEW  # everything else as runs of loop-cost-2 had it
    for older in (Rules.loop_cost(), Rules.people_in_charge(), Rules.sound_seams()):
        assert not any(getattr(older, name) for name in NEW)
