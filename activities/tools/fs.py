"""Race-safe access to the workspace: every path is walked one component at a time from a
descriptor of the workspace folder, and nothing is ever opened by its full path.

Each folder on the way is opened relative to its parent's descriptor with `O_NOFOLLOW`, so the
kernel never follows a symlink for us. A symlink met on the way is read (`readlink`) and its
target is walked the same way, from the folder it sits in or, for an absolute target, from the
workspace folder (which the target must name). A symlink that leads out, or a folder that is
swapped for a symlink between the check and the use, is refused instead of followed.

A path that ends in `/` (or `/.`) names a folder: `notes.txt/` is refused, as the kernel
refuses it, instead of opening `notes.txt` (rules see `notes.txt/` as `notes.txt`, and a tool must
not open a file under a name its rules did not see).

Errors name paths relative to the workspace, never the worker's absolute paths.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from activities.tools.base import ToolError
from workflows.shown import shorten

MAX_SYMLINKS = 40
"""As the kernel's own limit: more hops than this is a loop."""
MAX_DEPTH = 256
"""Folders deeper than this are refused (each level of the walk holds a descriptor)."""
PREVIEW_CHARS = 80
"""A path in an error message is cut to this many characters."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

_REASONS = {
    errno.ENOENT: "does not exist",
    errno.ENAMETOOLONG: "has a name that is too long",
    errno.ENOTDIR: "is not a folder",
    errno.EACCES: "cannot be accessed (permission denied)",
    errno.EPERM: "cannot be changed (operation not permitted)",
    errno.ELOOP: "changed into a symlink while it was being opened; refused",
    errno.ENOTEMPTY: "is not empty",
    errno.EBUSY: "is busy",
    errno.EROFS: "is on a read-only file system",
}


def preview(path: str) -> str:
    """`path`, cut to a readable length for an error message."""
    return shorten(path, PREVIEW_CHARS, "…[{total} characters]")


def os_error(err: OSError, relative: str) -> ToolError:
    """An OS error as a short tool error naming the workspace-relative path."""
    reason = _REASONS.get(err.errno or 0) or f"cannot be used: {err.strerror or err}"
    return ToolError(f"'{preview(relative)}' {reason}")


def outside(raw: str) -> ToolError:
    return ToolError(f"path '{preview(raw)}' is outside the workspace; refused")


@dataclass
class Located:
    """Where a path leads: the entry `name` in the folder open as `folder` (a descriptor this
    object owns), or the folder itself when `name` is None. `relative` is the entry's path
    inside the workspace (`.` for the workspace folder)."""

    folder: int
    name: str | None
    relative: str
    is_root: bool = False
    closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.folder)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parts(text: str) -> list[str]:
    return [p for p in text.split("/") if p not in ("", ".")]


def names_a_folder(raw: str) -> bool:
    """Whether `raw` ends in `/` or `/.` (`a/`, `a/.`, `a//`): it names a folder."""
    last = raw.rsplit("/", 1)
    return len(last) == 2 and last[1] in ("", ".")


def not_a_folder(raw: str) -> ToolError:
    return ToolError(f"'{preview(raw)}' ends in '/' but is not a folder; refused")


def _relative(names: list[str], name: str | None = None) -> str:
    joined = "/".join([*names, *([name] if name else [])])
    return joined or "."


@dataclass(frozen=True)
class Workspace:
    """The folder the tools are confined to, walked by descriptor. Every path goes through
    `locate`."""

    root: Path

    @classmethod
    def at(cls, path: Path) -> Workspace:
        return cls(path.expanduser().resolve())

    def _inside_parts(self, absolute: str, raw: str) -> list[str]:
        """The components of an absolute path inside the workspace, or refused."""
        normal = os.path.normpath(absolute)
        root = str(self.root)
        if normal == root:
            return []
        if not normal.startswith(root.rstrip("/") + "/"):
            raise outside(raw)
        return _parts(normal[len(root) :])

    def initial_parts(self, raw: str) -> list[str]:
        if not raw.strip():
            raise ToolError("path must not be empty")
        if "\x00" in raw:
            raise ToolError("path must not contain NUL characters")
        if raw.startswith("/"):
            return self._inside_parts(raw, raw)
        if raw == "~" or raw.startswith("~/"):
            raise outside(raw)
        return _parts(raw)

    def relative_text(self, raw: str) -> str:
        """`raw` as the model should read it in an error: relative when it names the workspace."""
        root = str(self.root)
        if raw == root:
            return "."
        if raw.startswith(root.rstrip("/") + "/"):
            return raw[len(root.rstrip("/")) + 1 :]
        return raw

    def locate(self, raw: str, *, follow_last: bool) -> Located:
        """Walk `raw` from the workspace folder. Intermediate symlinks are followed (staying
        inside); the last one only with `follow_last`. Refused (ToolError): an empty path, a
        NUL byte, `..` above the workspace, an absolute path elsewhere, a symlink out, and a
        path ending in `/` whose entry is not a folder (for `follow_last=False`, a symlink is
        not a folder)."""
        folder_only = names_a_folder(raw)
        pending = deque(self.initial_parts(raw))
        stack: list[int] = [os.open(self.root, _DIR_FLAGS & ~os.O_NOFOLLOW)]
        names: list[str] = []
        hops = 0
        try:
            while pending:
                name = pending.popleft()
                if name == "..":
                    if not names:
                        raise outside(raw)
                    os.close(stack.pop())
                    names.pop()
                    continue
                last = not pending
                here = stack[-1]
                try:
                    info = os.stat(name, dir_fd=here, follow_symlinks=False)
                except OSError as err:
                    if last and err.errno == errno.ENOENT:
                        return self._found(stack, names, name)
                    raise os_error(err, _relative(names, name)) from None
                if stat.S_ISLNK(info.st_mode) and (follow_last or not last):
                    hops += 1
                    if hops > MAX_SYMLINKS:
                        raise ToolError(f"'{preview(raw)}' has too many levels of symlinks")
                    target = self._read_link(here, name, names)
                    folder_only = folder_only or (last and names_a_folder(target))
                    if target.startswith("/"):
                        inside = self._inside_parts(target, raw)
                        while len(stack) > 1:
                            os.close(stack.pop())
                        names.clear()
                        pending.extendleft(reversed(inside))
                    else:
                        pending.extendleft(reversed(_parts(target)))
                    continue
                if last:
                    if folder_only and not stat.S_ISDIR(info.st_mode):
                        raise not_a_folder(raw)
                    return self._found(stack, names, name)
                if len(names) >= MAX_DEPTH:
                    raise ToolError(
                        f"'{preview(raw)}' is nested more than {MAX_DEPTH} folders deep"
                    )
                try:
                    stack.append(os.open(name, _DIR_FLAGS, dir_fd=here))
                except OSError as err:
                    raise os_error(err, _relative(names, name)) from None
                names.append(name)
            return self._found(stack, names, None)
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise

    def opened_path(self, raw: str, *, follow_last: bool) -> str:
        """The workspace-relative path `locate` leads to (what a tool opens for `raw`): the
        worker re-checks its enforced rules with it. ToolError when the tool would refuse."""
        with self.locate(raw, follow_last=follow_last) as located:
            return located.relative

    def real_relative(self, fd: int, walked: str) -> str:
        """The workspace-relative path of what descriptor `fd` really is, read back from the
        kernel (`/proc/self/fd`) after opening: what the worker's enforced rules check, so that
        no swap between walking and opening goes unseen. Refused when it is outside the
        workspace (moved out since). `walked` (the path the walk found) where the kernel cannot
        say (no `/proc`)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return walked
        root = str(self.root)
        if real == root:
            return "."
        if not real.startswith(root.rstrip("/") + "/"):
            raise outside(walked)
        return real[len(root.rstrip("/")) + 1 :]

    def entry_relative(self, located: Located) -> str:
        """The workspace-relative path of the entry `located` names, its folder read back from
        the kernel (`real_relative`): what `delete_path` removes."""
        folder = self.real_relative(located.folder, located.relative)
        if located.name is None:
            return folder
        return located.name if folder == "." else f"{folder}/{located.name}"

    @staticmethod
    def _found(stack: list[int], names: list[str], name: str | None) -> Located:
        """Keep the innermost descriptor for the result, close the others."""
        folder = stack.pop()
        for fd in stack:
            os.close(fd)
        stack.clear()
        return Located(folder, name, _relative(names, name), is_root=not names and name is None)

    @staticmethod
    def _read_link(folder: int, name: str, names: list[str]) -> str:
        try:
            return os.readlink(name, dir_fd=folder)
        except OSError as err:  # swapped for something else since the stat
            if err.errno == errno.EINVAL:
                raise ToolError(
                    f"'{preview(_relative(names, name))}' changed while it was being opened; "
                    "refused"
                ) from None
            raise os_error(err, _relative(names, name)) from None


def open_folder(located: Located) -> int:
    """A new descriptor of the folder `located` names (never through a symlink)."""
    if located.name is None:
        return os.dup(located.folder)
    try:
        return os.open(located.name, _DIR_FLAGS, dir_fd=located.folder)
    except OSError as err:
        raise os_error(err, located.relative) from None


def open_file(located: Located) -> int:
    """A descriptor of the regular file `located` names (never through a symlink)."""
    if located.name is None:
        raise ToolError(f"'{preview(located.relative)}' is not a regular file")
    try:
        fd = os.open(located.name, _FILE_FLAGS, dir_fd=located.folder)
    except OSError as err:
        raise os_error(err, located.relative) from None
    return fd
