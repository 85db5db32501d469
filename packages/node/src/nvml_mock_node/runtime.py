"""Build the overlay's self-contained Python runtime from the interpreter running this code.

Workload images need not have Python, and when they do it may be the wrong one. So the
overlay carries its own: this interpreter's binary, every shared library it and its
extension modules load (the ``ldd`` closure, the dynamic loader included), the standard
library without what a command-line tool never imports (tests, IDLE, Tk, ensurepip), and
the distributions the overlay's tools import with their dependencies. The launchers run
``<runtime>/lib/<loader> --library-path <runtime>/lib <runtime>/bin/python3 -I -c 'import
<module>.__main__'``, so nothing of the container's libc, loader or Python is used, and no
shim sits in front.

Building copies some tens of MiB; ``fingerprint`` names a runtime by everything that goes
into it, so re-staging reuses an identical runtime instead of copying it again.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_engine.errors import StageError

__all__ = ["ROOT_DISTRIBUTIONS", "RuntimeSource", "build_runtime", "fingerprint", "runtime_source"]

logger = logging.getLogger(__name__)

ROOT_DISTRIBUTIONS: Final = (
    "nvml-mock-node",
    "nvml-mock-smi",
    "nvml-mock-imex",
    "nvml-mock-check-fabric",
    "nvidia-ml-py",
)
"""Distributions the overlay's tools need; their dependencies come along."""

_STDLIB_SKIP_DIRS: Final = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "pydoc_data",
        "__phello__",
    }
)
_DYNLOAD_SKIP_RE: Final = re.compile(r"^(_tkinter|_test\w*|_xxtestfuzz|xx\w*|_ctypes_test)\.")
_LDD_LINE_RE: Final = re.compile(r"^\s*(\S+)\s*(?:=>\s*(\S+))?\s*\(0x[0-9a-f]+\)\s*$")
_FORMAT: Final = "1"


@dataclass(frozen=True, slots=True)
class RuntimeSource:
    """Where the runtime's parts come from on this machine."""

    interpreter: Path
    """The real interpreter binary (symlinks and venvs resolved)."""
    stdlib: Path
    dynload: Path
    packages: tuple[Path, ...]
    """Top-level packages and modules to copy into site-packages."""
    metadata: tuple[Path, ...]
    """``*.dist-info`` directories of the copied distributions."""
    version: str
    """``python3.11``: the stdlib directory name."""


def runtime_source() -> RuntimeSource:
    """Locate this interpreter's parts and the tool distributions' import packages."""
    interpreter = Path(os.path.realpath(sys.executable))
    if not interpreter.is_file():
        raise StageError(f"cannot find the interpreter binary behind {sys.executable}")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = stdlib / "lib-dynload"
    packages: dict[str, Path] = {}
    metadata: list[Path] = []
    for dist in _distribution_closure(ROOT_DISTRIBUTIONS):
        info = getattr(dist, "_path", None)
        if isinstance(info, Path) and info.is_dir():
            metadata.append(info)
        for name in _import_names(dist):
            spec = importlib.util.find_spec(name)
            if spec is None:
                continue
            if spec.submodule_search_locations:
                packages[name] = Path(next(iter(spec.submodule_search_locations)))
            elif spec.origin:
                packages[name] = Path(spec.origin)
    return RuntimeSource(
        interpreter=interpreter,
        stdlib=stdlib,
        dynload=dynload,
        packages=tuple(packages[k] for k in sorted(packages)),
        metadata=tuple(sorted(metadata)),
        version=stdlib.name,
    )


def fingerprint(source: RuntimeSource) -> str:
    """A short hash of everything the runtime is built from (cheap: stats, not contents)."""
    digest = hashlib.sha256()
    stat = source.interpreter.stat()
    digest.update(f"{_FORMAT}|{source.interpreter}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    digest.update(f"|{sys.version}|{source.stdlib}".encode())
    for root in (*source.packages, *source.metadata):
        for path in _walk(root):
            st = path.stat()
            digest.update(f"|{path}|{st.st_size}|{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def build_runtime(dest: Path, source: RuntimeSource) -> None:
    """Lay out a complete runtime at *dest* (which must not exist)."""
    lib = dest / "lib"
    pylib = lib / source.version
    (dest / "bin").mkdir(parents=True)
    lib.mkdir()
    shutil.copy2(source.interpreter, dest / "bin" / "python3")
    _copy_tree(source.stdlib, pylib, skip_dirs=_STDLIB_SKIP_DIRS, top_only_skip=True)
    elves = [dest / "bin" / "python3", *sorted(p for p in lib.rglob("*.so") if p.is_file())]
    loader = _copy_shared_libraries(elves, lib)
    if loader is None:
        raise StageError(f"cannot find the dynamic loader of {source.interpreter} (ldd names none)")

    # Ask the runtime where its site-packages is: distributions patch site.py (Debian's
    # dist-packages), so the path is the interpreter's answer, not a convention.
    site = _site_packages(dest, loader)
    for path in source.packages:
        target = site / path.name
        if path.is_dir():
            _copy_tree(path, target, skip_dirs=frozenset({"tests"}), top_only_skip=False)
        else:
            shutil.copy2(path, target)
    for info in source.metadata:
        _copy_tree(info, site / info.name, skip_dirs=frozenset(), top_only_skip=False)
    _copy_shared_libraries(sorted(p for p in site.rglob("*.so") if p.is_file()), lib)
    (dest / "loader").write_text(loader + "\n", encoding="utf-8")
    compileall.compile_dir(str(pylib), quiet=2, workers=1, ddir=None)
    if not site.is_relative_to(pylib):
        compileall.compile_dir(str(site), quiet=2, workers=1, ddir=None)


def _site_packages(dest: Path, loader: str) -> Path:
    """The first site-packages directory the runtime's own ``site`` module puts under *dest*."""
    code = "import site; print(*site.getsitepackages(), sep='\\n')"
    argv = [str(dest / "lib" / loader), "--library-path", str(dest / "lib")]
    argv += [str(dest / "bin" / "python3"), "-I", "-c", code]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except OSError as exc:
        raise StageError(f"the runtime at {dest} does not start: {exc}") from exc
    if result.returncode != 0:
        raise StageError(f"the runtime at {dest} does not start: {result.stderr.strip()}")
    for line in result.stdout.splitlines():
        path = Path(line)
        if path.is_relative_to(dest):
            path.mkdir(parents=True, exist_ok=True)
            return path
    raise StageError(f"the runtime at {dest} has no site-packages under it: {result.stdout!r}")


def loader_name(runtime: Path) -> str:
    """The dynamic loader's file name inside a built runtime's ``lib/``."""
    return (runtime / "loader").read_text(encoding="utf-8").strip()


def _distribution_closure(roots: Iterable[str]) -> list[importlib.metadata.Distribution]:
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = list(roots)
    while pending:
        name = _normalise(pending.pop())
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            logger.debug("distribution %s is not installed; not copied into the runtime", name)
            continue
        found[name] = dist
        for requirement in dist.requires or ():
            head, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", head)
            if match:
                pending.append(match.group(1))
    return [found[k] for k in sorted(found)]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _import_names(dist: importlib.metadata.Distribution) -> set[str]:
    """Top-level import names of a distribution, editable installs included."""
    names: set[str] = set()
    top_level = dist.read_text("top_level.txt")
    if top_level:
        names.update(line.strip() for line in top_level.splitlines() if line.strip())
    for entry in dist.files or ():
        parts = entry.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(".dist-info"):
            continue
        if entry.suffix == ".pth":
            names.update(_names_from_pth(Path(str(dist.locate_file(entry)))))
        elif len(parts) > 1 or entry.suffix in (".py", ".so"):
            names.add(parts[0].split(".")[0] if len(parts) == 1 else parts[0])
    return {n for n in names if n.isidentifier()}


def _names_from_pth(pth: Path) -> set[str]:
    """Packages found under the source directories an editable install's ``.pth`` adds."""
    names: set[str] = set()
    try:
        lines = pth.read_text(encoding="utf-8").splitlines()
    except OSError:
        return names
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", "import ")):
            continue
        directory = Path(line)
        if directory.is_dir():
            names.update(p.parent.name for p in directory.glob("*/__init__.py"))
    return names


def _walk(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            yield Path(dirpath) / filename


def _copy_tree(src: Path, dest: Path, *, skip_dirs: frozenset[str], top_only_skip: bool) -> None:
    """Copy *src* to *dest*, keeping mtimes (so copied ``.pyc`` files stay valid)."""
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        rel = here.relative_to(src)
        if not top_only_skip or rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        dirnames[:] = [d for d in dirnames if not d.startswith("config-")]
        target = dest / rel
        target.mkdir(parents=True, exist_ok=True)
        for filename in filenames:
            if here.name == "lib-dynload" and _DYNLOAD_SKIP_RE.match(filename):
                continue
            if here.name == "__pycache__" and ".opt-" in filename:
                continue
            if filename.endswith((".exe", ".a")):
                continue
            source = here / filename
            if source.is_symlink() and not source.exists():
                continue
            shutil.copy2(source, target / filename)


def _copy_shared_libraries(elves: list[Path], lib: Path) -> str | None:
    """Copy the shared-library closure of *elves* into *lib*; returns the loader's file name."""
    loader: str | None = None
    for elf in elves:
        for soname, resolved in _ldd(elf):
            name = Path(soname).name
            if resolved is None and not soname.startswith("/"):
                continue
            if resolved is None:
                loader = loader or name
            if not (lib / name).exists():
                shutil.copy2(os.path.realpath(resolved or soname), lib / name)
    return loader


def _ldd(elf: Path) -> list[tuple[str, str | None]]:
    """``(soname, path)`` pairs ``ldd`` reports; path None for the loader and the vDSO."""
    try:
        result = subprocess.run(
            ["ldd", str(elf)], capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError as exc:
        raise StageError("building the runtime needs ldd (Debian: libc-bin)") from exc
    if result.returncode != 0:
        if "not a dynamic executable" in result.stdout + result.stderr:
            return []
        raise StageError(f"ldd {elf} failed: {result.stderr.strip() or result.stdout.strip()}")
    pairs: list[tuple[str, str | None]] = []
    for line in result.stdout.splitlines():
        if "not found" in line:
            raise StageError(f"{elf} needs a library that is not installed: {line.strip()}")
        match = _LDD_LINE_RE.match(line)
        if match is None or "vdso" in match.group(1):
            continue
        pairs.append((match.group(1), match.group(2)))
    return pairs
