"""The work-alike's hand-written ctypes bindings (``smi/_nvml.py``) against NVIDIA's ``nvml.h``.

The header comes from the ``nvidia-nvml-dev`` package, as for the C library's build. A small C
program compiled against it prints each bound struct's size and field offsets and the size of
every type a prototype names; the prototypes come from the preprocessed header (so the
``nvmlInit`` -> ``nvmlInit_v2`` renames apply as they do for a C caller), and the mock library's
own ``nvml_mock_*`` exports from its sources. Every NVML call the
tool makes while running its commands against the mock is recorded and checked: the function
is declared, the argument count matches, a pointer goes where the header takes one, and the
object behind it is as large as the header's pointee (an array: its element).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_smi import _nvml
from smi_fixtures.helpers import render_profile, smi

PROTOTYPE = re.compile(r"[\w*]\s+\**(nvml\w+)\s*\(([^;{()]*)\)\s*;", re.S)
MOCK_EXPORT = re.compile(r"MOCK_EXPORT\s+nvmlReturn_t\s+(nvml_mock_\w+)\s*\(([^;{()]*)\)\s*;", re.S)
NATIVE = Path(__file__).resolve().parents[3] / "nvml-engine" / "native" / "src"
# Called by name but answered by every driver outside the header: none today.
NOT_IN_HEADER: frozenset[str] = frozenset()


def _include_dir() -> Path:
    for file in metadata.files("nvidia-nvml-dev") or []:
        if str(file).endswith("include/nvml.h"):
            return Path(str(file.locate())).parent
    pytest.fail("nvidia-nvml-dev is not installed: no nvml.h to check the bindings against")


def _structs() -> list[type[ctypes.Structure | ctypes.Union]]:
    return [
        v
        for v in vars(_nvml).values()
        if isinstance(v, type)
        and issubclass(v, ctypes.Structure | ctypes.Union)
        and "_nvml_type_" in vars(v)
    ]


class Param:
    """One prototype parameter: its base type and whether it is a pointer."""

    def __init__(self, text: str) -> None:
        text = " ".join(text.replace("const ", "").split())
        self.pointer = "*" in text or text.endswith("]")
        text = re.sub(r"\[.*\]$", "", text).replace("*", " ")
        words = text.split()
        self.type = " ".join(words[:-1]) if len(words) > 1 else words[0]

    def __repr__(self) -> str:
        return f"{self.type}{' *' if self.pointer else ''}"


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Prototypes of the preprocessed header, and the sizes the compiler gives."""
    include = _include_dir()
    out = tmp_path_factory.mktemp("nvml-h")
    prototypes: dict[str, list[Param]] = {}
    # the versioned names a C caller gets, then the old unversioned ABI names the tool falls
    # back to on drivers that lack the newer symbol
    for define in ("", "-DNVML_NO_UNVERSIONED_FUNC_DEFS"):
        pre = subprocess.run(
            ["cc", "-E", "-P", *([define] if define else []), "-I", str(include), "-"],
            input="#include <nvml.h>\n",
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for name, params in PROTOTYPE.findall(pre):
            items = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
            prototypes.setdefault(name, [Param(p) for p in items])
    # the mock library's own exports (not in nvml.h; absent on a real driver), as it declares them
    for source in sorted(NATIVE.glob("*.c")):
        text = source.read_text(encoding="utf-8")
        for name, params in MOCK_EXPORT.findall(text):
            prototypes.setdefault(name, [Param(p) for p in params.split(",") if p.strip()])
    types = sorted({p.type for ps in prototypes.values() for p in ps if p.type != "void"})
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <nvml.h>", "int main(void) {"]
    for t in types:
        lines.append(f'printf("size %s %zu\\n", "{t}", sizeof({t}));')
    for struct in _structs():
        c = vars(struct)["_nvml_type_"]
        lines.append(f'printf("size {c} %zu\\n", sizeof({c}));')
        for field, *_ in struct._fields_:
            lines.append(f'printf("offset {c}.{field} %zu\\n", offsetof({c}, {field}));')
            lines.append(f'printf("fsize {c}.{field} %zu\\n", sizeof((({c}*)0)->{field}));')
    lines += ["return 0;", "}"]
    (out / "sizes.c").write_text("\n".join(lines) + "\n")
    build = subprocess.run(
        ["cc", "-I", str(include), "-o", str(out / "sizes"), str(out / "sizes.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, "a binding names what nvml.h lacks:\n" + build.stderr[-3000:]
    run = subprocess.run([str(out / "sizes")], capture_output=True, text=True, check=True)
    facts: dict[str, dict[str, int]] = {"size": {}, "offset": {}, "fsize": {}}
    for line in run.stdout.splitlines():
        kind, rest = line.split(" ", 1)
        key, value = rest.rsplit(" ", 1)
        facts[kind][key] = int(value)
    return {"prototypes": prototypes, **facts}


def test_every_struct_matches_its_nvml_h_layout(header: dict[str, Any]) -> None:
    wrong = []
    for struct in _structs():
        c = vars(struct)["_nvml_type_"]
        if ctypes.sizeof(struct) != header["size"][c]:
            wrong.append(f"{struct.__name__}: size {ctypes.sizeof(struct)} != {header['size'][c]}")
        for field, ctype, *_ in struct._fields_:
            mine = getattr(struct, field)
            if mine.offset != header["offset"][f"{c}.{field}"]:
                wrong.append(f"{struct.__name__}.{field}: offset {mine.offset}")
            if ctypes.sizeof(ctype) != header["fsize"][f"{c}.{field}"]:
                wrong.append(f"{struct.__name__}.{field}: size {ctypes.sizeof(ctype)}")
    assert _structs(), "no bound struct names its nvml.h type"
    assert wrong == []


def _field_names() -> set[str]:
    return {field for struct in _structs() for field, *_ in struct._fields_}


def _named_functions() -> set[str]:
    src = Path(_nvml.__file__).parent
    names: set[str] = set()
    for file in [*src.glob("*.py"), *src.glob("_commands/*.py")]:
        # a quoted name followed by a comma or a closing parenthesis: a call, not a field
        text = file.read_text(encoding="utf-8")
        names |= set(re.findall(r'"(nvml[A-Z]\w+)"\s*[,)]', text)) - _field_names()
    return {n for n in names if not n.endswith("_t")}


def test_every_function_the_tool_names_is_declared(header: dict[str, Any]) -> None:
    missing = sorted(_named_functions() - set(header["prototypes"]) - NOT_IN_HEADER)
    assert missing == []


@pytest.fixture(scope="module")
def recorded(library_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    """Every (name, args) the tool passes to NVML while running each of its commands."""
    from nvml_mock_smi._apps import APP_FIELDS
    from nvml_mock_smi._fields import FIELDS, lookup
    from nvml_mock_smi._generation import parse_driver_version

    out = tmp_path_factory.mktemp("smi-bindings")
    calls: list[Any] = []
    original = _nvml.Nvml.call

    def record(self: _nvml.Nvml, name: str, *args: Any) -> None:
        calls.append((name, args))
        original(self, name, *args)

    patch = pytest.MonkeyPatch()
    patch.setattr(_nvml.Nvml, "call", record)
    app_fields = ",".join(f.names[0] for f in APP_FIELDS)
    commands = [
        (),
        ("-L",),
        ("-q",),
        ("--version",),
        ("topo", "-m"),
        ("nvlink", "-s"),
        ("nvlink", "-c"),
        (f"--query-compute-apps={app_fields}", "--format=csv"),
        ("nvlink", "-e"),
        ("nvlink", "-gt", "d"),
        ("topo", "-p2p", "r"),
        ("topo", "-C", "-i", "0"),
        ("topo", "-n", "5", "-i", "0"),
        ("dmon", "-s", "pucvmet", "-c", "2", "-d", "1"),
        ("pmon", "-s", "um", "-c", "1"),
    ]
    try:
        for profile in ("a100", "h100", "gb200", "t4"):
            state = render_profile(profile, 2, out / profile)
            patch.setenv("MOCK_NVML_CONFIG", str(state))
            # every property the profile's driver accepts (the others are refused unread)
            driver = re.search(r"(?m)^driver_version=(.*)$", state.read_text())
            accepted = parse_driver_version(driver.group(1) if driver else "")
            gpu_fields = ",".join(f.name for f in FIELDS if lookup(f.name, accepted))
            for args in [*commands, (f"--query-gpu={gpu_fields}", "--format=csv")]:
                assert smi(library_file, *args)[0] == 0, (profile, args)
        yield calls
    finally:
        patch.undo()


def _pointee(arg: Any) -> Any:
    """The object a pointer argument points at, or None when ``arg`` is not a pointer."""
    if type(arg).__name__ == "CArgObject":
        return arg._obj
    if isinstance(arg, ctypes.Array):
        return arg
    if isinstance(arg, ctypes._Pointer):
        return arg.contents
    return None


def test_every_call_matches_its_prototype(header: dict[str, Any], recorded: list[Any]) -> None:
    sizes, prototypes = header["size"], header["prototypes"]
    seen: set[str] = set()
    wrong: list[str] = []
    for name, args in recorded:
        seen.add(name)
        params = prototypes.get(name)
        if params is None:
            wrong.append(f"{name}: not declared in nvml.h")
            continue
        if len(params) != len(args):
            wrong.append(f"{name}: {len(args)} arguments, nvml.h takes {len(params)}")
            continue
        for i, (param, arg) in enumerate(zip(params, args, strict=True)):
            target = _pointee(arg)
            where = f"{name} argument {i} ({param!r})"
            if param.pointer:
                if arg is None:
                    continue  # NULL: a size query
                if target is None:
                    wrong.append(f"{where}: passed {type(arg).__name__}, not a pointer")
                    continue
                if param.type == "void":
                    continue
                element = target._type_ if isinstance(target, ctypes.Array) else type(target)
                if ctypes.sizeof(element) != sizes[param.type]:
                    wrong.append(f"{where}: points at {ctypes.sizeof(element)} bytes")
            elif target is not None:
                wrong.append(f"{where}: passed a pointer for a value")
            else:
                size = 4 if isinstance(arg, int) else ctypes.sizeof(type(arg))
                if size != sizes[param.type]:
                    wrong.append(f"{where}: {size} bytes, nvml.h takes {sizes[param.type]}")
    assert len(seen) > 60, sorted(seen)
    assert not wrong, "\n".join(sorted(set(wrong)))
