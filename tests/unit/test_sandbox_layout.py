"""What the sandbox shows, decided without running it: the bubblewrap arguments for the system
folders, /etc's private files, the worker's places inside a shown folder, and an MCP server's
program (a virtual environment and its base Python, a `#!` interpreter)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from activities.tools.sandbox import bwrap_argv
from activities.tools.sandbox_layout import (
    ALWAYS_HIDDEN_IN_ETC,
    mask_args,
    private_etc_entries,
    private_paths,
    program_paths,
    system_args,
    visible_sources,
)


def pairs(args: list[str], option: str) -> list[str]:
    """The destination of every `option SRC DEST` (or `option DEST`) in bwrap's arguments."""
    width = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--remount-ro": 1}[option]
    return [args[i + width] for i, a in enumerate(args) if a == option]


def test_only_system_folders_and_the_workspace_are_bound(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = bwrap_argv("bwrap", workspace, ["/bin/sh", "-c", "true"], environ={"HOME": "/root"})
    bound = {p for p in pairs(args, "--ro-bind") if not p.startswith("/etc/")}
    linked = set(pairs(args, "--symlink"))
    assert bound | linked <= {
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc",
        "/opt",
    }
    assert "/usr" in bound and "/etc" in bound
    assert "/" not in bound  # never the whole disk
    assert pairs(args, "--bind") == [str(workspace.resolve())]
    assert args[args.index("--") + 1 :] == ["/bin/sh", "-c", "true"]
    assert "--unshare-net" in args and "/" in pairs(args, "--remount-ro")
    # Every empty folder mounted over something private stays read-only (only /tmp is writable).
    assert set(pairs(args, "--tmpfs")) - {"/tmp", "/run"} <= set(pairs(args, "--remount-ro"))


def test_etc_files_other_users_may_not_read_are_hidden() -> None:
    hidden = dict(private_etc_entries())
    for path, is_folder in hidden.items():
        wanted = 0o005 if is_folder else 0o004
        private = os.lstat(path).st_mode & wanted != wanted
        assert private or os.path.basename(path) in ALWAYS_HIDDEN_IN_ETC, path
    if os.path.exists("/etc/shadow"):
        assert "/etc/shadow" in hidden
        assert "/etc/shadow" in pairs(system_args(), "--ro-bind")  # /dev/null over it


def test_a_worker_place_inside_a_shown_folder_gets_an_empty_folder(tmp_path: Path) -> None:
    shown = [str(tmp_path / "opt")]
    workspace = tmp_path / "opt" / "agent" / "ws"
    state = tmp_path / "opt" / "agent" / ".agent-state"
    for folder in (workspace, state):
        folder.mkdir(parents=True)
    places = private_paths(workspace, [state], {"HOME": "/nonexistent-home"})
    masks = mask_args(places, shown, str(workspace))
    masked = pairs(masks, "--tmpfs")
    assert str(workspace.parent) in masked  # the folder the workspace sits in (and the state)
    assert str(workspace) not in masked


def fake_venv(root: Path, base: Path) -> Path:
    """A virtual environment whose python links to `base`'s, with a script using it."""
    (root / "bin").mkdir(parents=True)
    (base / "bin").mkdir(parents=True)
    real = base / "bin" / "python3.11"
    real.write_text("")
    real.chmod(0o755)
    (root / "bin" / "python3").symlink_to(real)
    (root / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\n")
    script = root / "bin" / "mcp-server-x"
    script.write_text(f"#!{root / 'bin' / 'python3'}\nimport x\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_an_mcp_server_s_venv_and_its_base_python_are_made_visible(tmp_path: Path) -> None:
    venv, base = tmp_path / "venv", tmp_path / "pythons" / "3.11"
    script = fake_venv(venv, base)
    found = program_paths(str(script), str(venv / "bin"))
    assert set(found) == {str(venv.resolve()), str(base.resolve())}


def test_a_program_in_a_home_s_bin_shows_only_the_program(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    program = home / "bin" / "server"
    program.write_text("")
    program.chmod(0o755)
    found = program_paths(str(program), str(home / "bin"), private=[str(home.resolve())])
    assert found == [str(program.resolve())]  # never the whole home folder


def test_the_python_of_these_tests_is_made_reachable() -> None:
    found = program_paths(sys.executable, os.environ.get("PATH", ""))
    reachable = [*found, *visible_sources()]
    real = Path(sys.executable).resolve()
    assert any(real.is_relative_to(folder) for folder in reachable), (real, found)
    if sys.prefix != sys.base_prefix:  # a virtual environment: shown whole
        assert str(Path(sys.prefix).resolve()) in reachable
