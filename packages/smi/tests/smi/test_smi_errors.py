"""Error paths and exit codes, as scripts that wrap ``nvidia-smi`` expect them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nvml_mock_smi._errors import DRIVER_MESSAGE, INVALID_ARGS_MESSAGE, LIBRARY_MESSAGE
from smi_fixtures.helpers import smi, smi_process


@pytest.fixture
def two_gpus(write_state) -> Path:  # type: ignore[no-untyped-def]
    return write_state(2)  # type: ignore[no-any-return]


def test_invalid_field(library_file: Path, two_gpus: Path) -> None:
    rc, out = smi(library_file, "--query-gpu=name,nonsense.field", "--format=csv")
    assert (rc, out) == (2, 'Field "nonsense.field" is not a valid field to query.\n')


def test_invalid_compute_apps_field(library_file: Path, two_gpus: Path) -> None:
    rc, out = smi(library_file, "--query-compute-apps=pid,bogus", "--format=csv")
    assert (rc, out) == (2, 'Field "bogus" is not a valid field to query.\n')


@pytest.mark.parametrize(
    "ident", ["7", "GPU-00000000-0000-0000-0000-000000000000", "00000000:99:00.0", "nope"]
)
def test_unknown_id_finds_no_device(library_file: Path, two_gpus: Path, ident: str) -> None:
    rc, out = smi(library_file, "-i", ident, "-L")
    assert (rc, out) == (6, "No devices were found\n")


def test_no_devices(library_file: Path, write_state) -> None:  # type: ignore[no-untyped-def]
    write_state(0)
    for args in ((), ("-L",), ("-q",), ("--query-gpu=name", "--format=csv")):
        rc, out = smi(library_file, *args)
        assert (rc, out) == (6, "No devices were found\n"), args


def test_missing_state_is_a_driver_failure(
    library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(tmp_path / "absent.nvmlmock"))
    rc, out = smi(library_file, "-L")
    assert (rc, out) == (9, DRIVER_MESSAGE + "\n")


def test_malformed_state_names_the_problem(library_file: Path, write_state) -> None:  # type: ignore[no-untyped-def]
    write_state(text="nvml-mock-state 1\n[system]\ndevice_count=x\n")
    rc, out = smi(library_file, "-L")
    assert rc == 255
    assert out.startswith("Failed to initialize NVML: ")
    assert "device_count" in out


def test_library_not_found(tmp_path: Path) -> None:
    rc, out = smi(tmp_path / "libnvidia-ml.so.1", "-L")
    assert (rc, out) == (12, LIBRARY_MESSAGE + "\n")


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["-q", "-L"],
        ["-x"],
        ["-d", "MEMORY"],
        ["-i"],
        ["--query-gpu=name", "--format=xml"],
        ["--query-gpu=name", "--query-compute-apps=pid", "--format=csv"],
        ["topo"],
        ["topo", "-x"],
        ["nvlink", "-s", "-c"],
        ["-l", "-3"],
    ],
)
def test_bad_arguments(library_file: Path, two_gpus: Path, args: list[str]) -> None:
    rc, out = smi(library_file, *args)
    assert (rc, out) == (2, INVALID_ARGS_MESSAGE + "\n")


def test_unknown_display_section(library_file: Path, two_gpus: Path) -> None:
    rc, out = smi(library_file, "-q", "-d", "MEMORY,WHATEVER")
    assert (rc, out) == (2, INVALID_ARGS_MESSAGE + "\n")


def test_query_without_format(library_file: Path, two_gpus: Path) -> None:
    rc, out = smi(library_file, "--query-gpu=name")
    assert rc == 2
    assert "--format" in out


def test_subprocess_exit_codes_and_streams(library_file: Path, tmp_path: Path) -> None:
    proc = smi_process(library_file, ["-L"], {"MOCK_NVML_CONFIG": str(tmp_path / "absent")})
    assert proc.returncode == 9
    assert proc.stdout == DRIVER_MESSAGE + "\n"
    proc = smi_process(
        library_file,
        ["--query-gpu=x", "--format=csv"],
        {"MOCK_NVML_CONFIG": str(tmp_path / "absent")},
    )
    assert (proc.returncode, proc.stdout) == (2, 'Field "x" is not a valid field to query.\n')


def test_help_lists_every_exit_code_the_tool_returns() -> None:
    from nvml_mock_smi import _errors
    from nvml_mock_smi._commands.help import TEXT as HELP

    codes = {value for name, value in vars(_errors).items() if name.startswith("EXIT_")}
    listed = HELP.split("Exit codes:", 1)[1]
    assert {int(code) for code in re.findall(r"(\d+) [A-Za-z]", listed)} == codes
