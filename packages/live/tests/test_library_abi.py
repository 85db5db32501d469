"""The library ABI contract: the real mock library passes, one of another ABI is refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from nvml_mock_live import _layout, library
from nvml_mock_live.errors import LiveLayerError


def test_the_engine_registers_its_library_and_it_speaks_this_abi() -> None:
    path = library.default_library()
    assert path.name == "libnvidia-ml.so.1" and path.is_file()
    lib = library.load(path)
    assert lib.nvml_mock_live_abi_version() == _layout.LIVE_ABI_VERSION
    assert lib.nvml_mock_live_layout_bytes() == _layout.LIVE_TOTAL_BYTES


def _build(tmp_path: Path, body: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc) to build a library of another ABI")
    source = tmp_path / "other.c"
    source.write_text(body, encoding="utf-8")
    out = tmp_path / "libother.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


def _abi_source(version: int) -> str:
    return f"unsigned int nvml_mock_live_abi_version(void) {{ return {version}u; }}\n"


def test_a_library_of_another_abi_version_is_refused(tmp_path: Path) -> None:
    other = _build(tmp_path, _abi_source(_layout.LIVE_ABI_VERSION + 1))
    with pytest.raises(LiveLayerError, match=rf"live ABI {_layout.LIVE_ABI_VERSION + 1}, this"):
        library.load(other)


def test_a_library_without_the_abi_word_is_refused(tmp_path: Path) -> None:
    other = _build(tmp_path, "int nvml_mock_live_write(void) { return 0; }\n")
    with pytest.raises(LiveLayerError, match="exports no nvml_mock_live_abi_version"):
        library.load(other)


def test_a_library_missing_a_primitive_is_refused(tmp_path: Path) -> None:
    other = _build(tmp_path, _abi_source(_layout.LIVE_ABI_VERSION))
    with pytest.raises(LiveLayerError, match="has no nvml_mock_live_"):
        library.load(other)


def test_the_bound_primitives_are_the_declared_ones() -> None:
    declared = set(_layout.LIVE_ABI_PRIMITIVES)
    assert declared == set(library._SIGNATURES)
