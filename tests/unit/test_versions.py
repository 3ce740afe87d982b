"""The patches a run's code is behind (`workflows.versions`): the table's newest lines are 1.0's,
0.7's marker is deprecated (its recordings replay, nothing branches on it), and a new run
follows every patch. The replay of every recorded history is tests/workflow/test_replay.py; the
behaviours are tested with a real worker (tests/workflow/test_session_outage.py,
tests/cli/test_starter_audit_remembered.py, the own-keys tests)."""

from __future__ import annotations

from dataclasses import fields

from workflows.versions import LOOP_COST_2, OWN_KEYS, PATCHES, SESSIONS_OUTLIVE_OUTAGES, Patched


def test_the_table_names_each_patch_once_with_its_release_and_date():
    ids = [p.id for p in PATCHES]
    assert len(ids) == len(set(ids))
    assert {SESSIONS_OUTLIVE_OUTAGES, OWN_KEYS} <= set(ids)
    by_id = {p.id: p for p in PATCHES}
    assert by_id[LOOP_COST_2].deprecated and by_id[LOOP_COST_2].release == "0.7"
    assert all(by_id[i].release == "1.0" and not by_id[i].deprecated
               for i in (SESSIONS_OUTLIVE_OUTAGES, OWN_KEYS))  # fmt: skip
    assert all(p.open_until >= by_id[LOOP_COST_2].open_until for p in PATCHES)


def test_a_new_run_follows_every_patch_and_each_field_is_one_patch():
    assert all(getattr(Patched(), f.name) for f in fields(Patched))
    live = [p for p in PATCHES if not p.deprecated]
    assert len(fields(Patched)) == len(live)
