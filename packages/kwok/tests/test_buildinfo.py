"""The components' versions: Go build info read from binaries, and the versions check."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_kwok.buildinfo import read_build
from nvml_mock_kwok.cli import EXIT_FAILURE, EXIT_OK, main
from nvml_mock_kwok.errors import RecordError
from nvml_mock_kwok.truth import load_truth, variants

SENTINEL = bytes(16)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def go_binary(path: Path, module: str, version: str, revision: str) -> Path:
    """A file laid out as the Go linker lays out inline build info (Go 1.18+)."""
    modinfo = (
        f"path\t{module}/cmd/x\nmod\t{module}\t{version}\t\n"
        f"build\tvcs=git\nbuild\tvcs.revision={revision}\nbuild\tvcs.modified=false\n"
    ).encode()
    blob = SENTINEL + modinfo + SENTINEL
    header = b"\xff Go buildinf:" + bytes([8, 2]) + bytes(16)
    go = b"go1.26.0"
    path.write_bytes(
        b"\x7fELF"
        + bytes(100)
        + header
        + _varint(len(go))
        + go
        + _varint(len(blob))
        + blob
        + bytes(64)
    )
    path.chmod(0o755)
    return path


def test_reads_module_version_and_revision(tmp_path: Path) -> None:
    build = read_build(go_binary(tmp_path / "b", "github.com/x/y", "v1.2.3", "a" * 40))
    assert (build.module, build.version, build.revision, build.modified) == (
        "github.com/x/y",
        "v1.2.3",
        "a" * 40,
        False,
    )


def test_not_a_go_binary(tmp_path: Path) -> None:
    (tmp_path / "sh").write_bytes(b"#!/bin/sh\n")
    with pytest.raises(RecordError, match="carries no Go build info"):
        read_build(tmp_path / "sh")


def _bin_dir(tmp_path: Path, *, change: str | None = None) -> Path:
    truth = load_truth(variants()[0])
    merged: dict[str, dict] = {}
    for variant in variants():
        merged.update(load_truth(variant).components)
    for name, info in merged.items():
        version = "v9.9.9" if name == change else info["version"]
        go_binary(tmp_path / name, info["module"], version, info["revision"])
    assert truth.components
    return tmp_path


def test_versions_hold_given_binaries_to_the_fixtures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["versions", "--bin-dir", str(_bin_dir(tmp_path))]) == EXIT_OK
    out = capsys.readouterr().out
    assert "gb200: compute-domain-kubelet-plugin v0.4.0" in out


def test_versions_name_a_component_of_another_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bins = _bin_dir(tmp_path, change="nvidia-device-plugin")
    assert main(["versions", "--bin-dir", str(bins)]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "nvidia-device-plugin: recorded v0.20.0" in err and "given v9.9.9" in err
