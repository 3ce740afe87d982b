"""The demo's two people get keys made when it runs, offline: by `ssh-keygen -t ed25519` where it
is installed, else the same OpenSSH key files made with `cryptography`; either way the approvers
file lists both in ops and each key loads as its owner's, as `starter approve --key` loads it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.approvers import load_approvers
from starter import demo


@pytest.mark.parametrize("keygen", [True, False], ids=["ssh-keygen", "cryptography"])
def test_the_demo_makes_two_keys_at_run_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keygen: bool
) -> None:
    if not keygen:
        monkeypatch.setattr(shutil, "which", lambda _name: None)
    elif shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen here")
    approvers, made_by = demo.make_keys(tmp_path)
    assert made_by == ("ssh-keygen -t ed25519" if keygen else "cryptography")
    people = load_approvers(approvers)
    assert [(p.name, p.groups) for p in people.people()] == [("ana", ("ops",)), ("ben", ("ops",))]
    keys = demo.demo_keys(approvers)
    assert [(k.person, k.path.name) for k in keys.values()] == [
        ("ana", "ana.key"),
        ("ben", "ben.key"),
    ]
    assert keys["ana"].fingerprint != keys["ben"].fingerprint
    assert (tmp_path / "ana.key").stat().st_mode & 0o777 == 0o600
