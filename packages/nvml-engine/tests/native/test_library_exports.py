"""The library exports the whole NVML API and nothing else.

Go clients bind every NVML symbol they reference and abort on a missing one, so the
export list is compared with the declarations of the nvml.h the library was built
against and with the NVML 13.3 list (functions later headers dropped must stay).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from pathlib import Path

DATA = Path(__file__).parents[1] / "data"
DECLARATION = re.compile(r"\bnvmlReturn_t\s+DECLDIR\s+(nvml\w+)\s*\(")


def exported(library: Path) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def header_functions() -> set[str]:
    files = importlib.metadata.files("nvidia-nvml-dev") or []
    header = next(f for f in files if str(f).endswith("include/nvml.h"))
    text = Path(str(header.locate())).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return set(DECLARATION.findall(text)) | {"nvmlErrorString"}


def reference_functions() -> set[str]:
    lines = (DATA / "nvml-13.3-functions.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_header_function_is_exported(library_file: Path) -> None:
    declared = header_functions()
    assert len(declared) > 400
    assert sorted(declared - exported(library_file)) == []


def test_every_nvml_13_3_function_is_exported(library_file: Path) -> None:
    reference = reference_functions()
    assert len(reference) == 413
    assert sorted(reference - exported(library_file)) == []


def test_only_nvml_symbols_are_exported(library_file: Path) -> None:
    symbols = exported(library_file)
    assert {s for s in symbols if not s.startswith("nvml")} == set()
    assert "nvmlInternalGetExportTable" in symbols
    assert "state_parse" not in symbols


def test_soname(library_file: Path) -> None:
    out = subprocess.run(
        ["readelf", "-d", str(library_file)], capture_output=True, text=True, check=True
    )
    assert "Library soname: [libnvidia-ml.so.1]" in out.stdout


def test_unmodelled_functions_answer_not_supported(nvml: object, cnvml: object) -> None:
    import ctypes

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    count = ctypes.c_uint(7)
    # a vGPU query: generated stub
    assert lib.nvmlDeviceGetVgpuSchedulerLog(None, None) == 3
    assert lib.nvmlGetVgpuVersion(ctypes.byref(count), None) == 3
    table = ctypes.c_void_p(1)
    assert lib.nvmlInternalGetExportTable(ctypes.byref(table), None) == 3
    assert table.value is None
