"""What a sandboxed process sees of the host's file system: an allow-list, never the whole disk.

Visible, read-only: the system folders programs need (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`,
`/opt` when present), with every file of `/etc` that other users may not read hidden (`shadow`,
`gshadow`, `sudoers`, private keys). Visible, read-write: the workspace. Everything else is
absent: the worker's state folder, the folder the workspace sits in, the worker's working
directory, home folders, `/var`, `/srv`, `/home`, `/root`, `/mnt`, and the UNIX sockets in them (a
read-only bind would not stop `connect()`; an absent file does). Where one of those private
folders lies inside a visible system folder (a workspace under `/opt`), an empty folder is
mounted over it.

For an MCP server, the program it runs is made reachable too: the program file, the installation
it belongs to (the folder above its `bin/`, such as a virtual environment), that environment's
base Python, and the same for the interpreter its `#!` line names.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path

SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Shown read-only when present (a symlink, as on merged-/usr systems, is recreated as one)."""
ALWAYS_HIDDEN_IN_ETC = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d")
"""Hidden whatever their permissions say."""
ETC_SCAN_LIMIT = 20_000
"""At most this many entries of /etc are looked at (once per process) for private files."""
SHEBANG_DEPTH = 3


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def system_folders() -> list[tuple[str, str | None]]:
    """(folder, symlink target or None) for each system folder present on this machine."""
    found: list[tuple[str, str | None]] = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            found.append((folder, os.readlink(folder)))
        elif os.path.isdir(folder):
            found.append((folder, None))
    return found


def visible_sources() -> list[str]:
    """The real folders a sandboxed process sees read-only (symlinks resolved)."""
    return sorted({os.path.realpath(folder) for folder, _ in system_folders()})


@cache
def private_etc_entries() -> tuple[tuple[str, bool], ...]:
    """(path, is_folder) of every entry of /etc that other users may not read, found once per
    process, plus the ones hidden by name. A folder others may not enter is hidden whole."""
    hidden: dict[str, bool] = {}
    seen = 0
    for root, folders, files in os.walk("/etc"):
        keep: list[str] = []
        for name in [*folders, *files]:
            seen += 1
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            is_folder = stat.S_ISDIR(info.st_mode)
            wanted = 0o005 if is_folder else 0o004
            if info.st_mode & wanted != wanted:
                hidden[path] = is_folder
            elif is_folder:
                keep.append(name)
        folders[:] = [f for f in folders if f in keep]
        if seen > ETC_SCAN_LIMIT:
            break
    for name in ALWAYS_HIDDEN_IN_ETC:
        path = os.path.join("/etc", name)
        if os.path.lexists(path) and not os.path.islink(path):
            hidden[path] = os.path.isdir(path)
    return tuple(sorted(hidden.items()))


def system_args() -> list[str]:
    """bwrap arguments that show the system folders read-only and hide /etc's private files."""
    args: list[str] = []
    for folder, target in system_folders():
        if target is not None:
            args += ["--symlink", target, folder]
        else:
            args += ["--ro-bind", folder, folder]
    for path, is_folder in private_etc_entries():
        args += ["--tmpfs", path] if is_folder else ["--ro-bind", "/dev/null", path]
    return args


def private_paths(
    workspace: Path, extra: Iterable[Path] = (), environ: Mapping[str, str] | None = None
) -> list[str]:
    """The worker's own places: the folder the workspace sits in, the working directory, the
    home folder and `extra` (the state folder), resolved."""
    env = os.environ if environ is None else environ
    candidates = [workspace.parent, Path.cwd(), *extra]
    home = env.get("HOME") or ""
    if os.path.isabs(home):
        candidates.append(Path(home))
    return sorted({os.path.realpath(p) for p in candidates})


def mask_args(private: Sequence[str], shown: Sequence[str], workspace: str) -> list[str]:
    """An empty folder over each private place that lies inside a shown folder (and is not the
    workspace or inside it). A place above every shown folder (`/`) is already absent."""
    args: list[str] = []
    for path in private:
        if _inside(path, workspace) or not os.path.isdir(path):
            continue
        if any(_inside(path, folder) for folder in shown):
            args += ["--tmpfs", path]
    return args


def _interpreter(program: Path, path_env: str) -> Path | None:
    """The program named on a script's `#!` line (through `/usr/bin/env NAME` too)."""
    try:
        with program.open("rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        found = shutil.which(words[-1], path=path_env)
        return Path(found) if found else None
    return Path(words[0])


def _base_python(venv: Path) -> Path | None:
    """The installation a virtual environment's Python comes from (`home` in pyvenv.cfg)."""
    try:
        lines = (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).parent
    return None


def program_paths(command: str, path_env: str, private: Sequence[str] = ()) -> list[str]:
    """What must be visible for `command` to run in the sandbox, beyond the system folders: the
    program, its installation (the folder above its `bin/`), a virtual environment's base Python,
    and the same for its `#!` interpreter. An installation that is or holds a private place (a
    home folder itself) is not shown whole; only the program file is."""
    found = shutil.which(command, path=path_env)
    if found is None:
        return []
    shown = visible_sources()
    wanted: list[str] = []

    def add(path: Path) -> None:
        real = os.path.realpath(path)
        if any(_inside(real, folder) for folder in shown) or real in wanted:
            return
        if any(_inside(place, real) for place in private):
            return
        wanted.append(real)

    todo: list[Path] = [Path(found)]
    for _ in range(SHEBANG_DEPTH):
        if not todo:
            break
        program = todo.pop()
        for candidate in dict.fromkeys([program, Path(os.path.realpath(program))]):
            folder = candidate.parent
            if folder.name == "bin":
                prefix = folder.parent
                before = len(wanted)
                add(prefix)
                if len(wanted) == before and not any(
                    _inside(os.path.realpath(candidate), p) for p in [*wanted, *shown]
                ):
                    add(candidate)
                base = _base_python(prefix)
                if base is not None:
                    add(base)
            else:
                add(candidate)
        interpreter = _interpreter(Path(os.path.realpath(program)), path_env)
        if interpreter is not None:
            todo.append(interpreter)
    return wanted
