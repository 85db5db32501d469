"""A tree of small files kept true in place: write what changed, remove what went away.

The kernel surfaces of a driver installation (``proc/driver/nvidia/...``, the PCI sysfs
tree) are read by processes that hold the directory open or have it bind-mounted into
their container: the directory must stay the same directory while its contents change,
so the generation switch the rest of the overlay uses does not fit. Instead each file is
replaced by a rename (a reader sees the old file or the new one, never half of one), new
entries appear, and entries the new tree no longer holds are removed, as the kernel's
own procfs and sysfs entries come and go.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from nvml_mock_engine._files import write_atomic

__all__ = ["FileTree", "sync_tree"]


@dataclass(slots=True)
class FileTree:
    """What a directory should hold: files (bytes and mode), symlinks and empty directories,
    each by its path relative to the directory."""

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    def add(self, path: str, text: str | bytes, mode: int = 0o444) -> None:
        """Add a file; *text* is written as UTF-8."""
        data = text.encode() if isinstance(text, str) else text
        self.files[_checked(path)] = (data, mode)

    def link(self, path: str, target: str) -> None:
        """Add a symlink at *path* pointing at *target* (relative, as sysfs links are)."""
        self.links[_checked(path)] = target

    def mkdir(self, path: str) -> None:
        """Add a directory that holds nothing else."""
        self.dirs.add(_checked(path))

    def merge(self, other: FileTree, under: str = "") -> None:
        """Add every entry of *other*, below *under*."""
        prefix = f"{_checked(under)}/" if under else ""
        for name, entry in other.files.items():
            self.files[prefix + name] = entry
        for name, target in other.links.items():
            self.links[prefix + name] = target
        self.dirs.update(prefix + name for name in other.dirs)

    def wanted(self) -> set[str]:
        """Every path the tree names, its parent directories included."""
        names = {*self.files, *self.links, *self.dirs}
        parents = {str(p) for name in names for p in PurePosixPath(name).parents if str(p) != "."}
        return names | parents


def _checked(path: str) -> str:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ValueError(f"{path!r} is not a relative path inside the tree")
    return str(pure)


def sync_tree(root: Path, tree: FileTree, *, keep: Iterable[str] = ()) -> None:
    """Make *root* hold exactly *tree*: changed files are replaced by a rename, unchanged
    ones are left alone, entries outside the tree are removed (except those under a path
    of *keep*, which another writer owns)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in sorted(tree.dirs):
        (root / name).mkdir(parents=True, exist_ok=True)
    for name, (data, mode) in sorted(tree.files.items()):
        _write_if_changed(root / name, data, mode)
    for name, target in sorted(tree.links.items()):
        _link(root / name, target)
    _prune(root, tree.wanted(), tuple(keep))


def _write_if_changed(path: Path, data: bytes, mode: int) -> None:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        _remove(path)
    try:
        st = path.stat()
        if st.st_mode & 0o7777 == mode and st.st_size == len(data) and path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    write_atomic(path, data, mode=mode)


def _link(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = path.with_name(f".{path.name}.link")
    pending.unlink(missing_ok=True)
    pending.symlink_to(target)
    if path.exists() and path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    os.replace(pending, path)


def _prune(root: Path, wanted: set[str], keep: tuple[str, ...]) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        base = Path(dirpath)
        for name in [*filenames, *dirnames]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if rel in wanted or any(rel == k or rel.startswith(f"{k}/") for k in keep):
                continue
            _remove(path)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def tree_of(files: Mapping[str, str]) -> FileTree:
    """A tree of read-only text files (a convenience for callers and tests)."""
    tree = FileTree()
    for name, text in files.items():
        tree.add(name, text)
    return tree
