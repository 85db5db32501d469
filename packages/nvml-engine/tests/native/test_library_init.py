"""Init, shutdown, state loading and the error paths, through unmodified nvidia-ml-py."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import SYSTEM, StateWriter, gpu_entry, render_state

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29


class Failure(NamedTuple):
    value: int
    text: str

    def __str__(self) -> str:
        return self.text


def init_error(pynvml: Any) -> Failure:
    """Init must fail; return its code and nvmlErrorString(code) read right after."""
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlInit()
    code = caught.value.value
    # nvidia-ml-py caches str(error) per code for the process, so ask the library directly
    return Failure(code, pynvml.nvmlErrorString(code))


def test_init_reads_the_state(nvml: Any) -> None:
    assert nvml.nvmlDeviceGetCount() == 2
    assert nvml.nvmlSystemGetDriverVersion() == "580.65.06"
    assert nvml.nvmlSystemGetNVMLVersion() == "13.580.65.06"
    assert nvml.nvmlSystemGetCudaDriverVersion() == 13000
    assert nvml.nvmlSystemGetCudaDriverVersion_v2() == 13000


def test_shutdown_is_reference_counted(
    pynvml: Any, write_state: StateWriter, cnvml: ctypes.CDLL
) -> None:
    write_state()
    assert cnvml.nvmlInit_v2() == 0
    assert cnvml.nvmlInitWithFlags(0) == 0
    count = ctypes.c_uint()
    assert cnvml.nvmlShutdown() == 0
    assert cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    assert count.value == 2
    assert cnvml.nvmlShutdown() == 0
    assert cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == NVML_ERROR_UNINITIALIZED
    assert cnvml.nvmlShutdown() == NVML_ERROR_UNINITIALIZED


def test_reinit_reloads_the_state(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=2)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2
    pynvml.nvmlShutdown()
    write_state(count=5)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 5


def test_calls_before_init_are_uninitialized(pynvml: Any, cnvml: ctypes.CDLL) -> None:
    count = ctypes.c_uint()
    assert cnvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == NVML_ERROR_UNINITIALIZED
    handle = ctypes.c_void_p()
    assert cnvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == NVML_ERROR_UNINITIALIZED


def test_no_gpus_needs_the_flag(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=0)
    error = init_error(pynvml)
    assert error.value == NVML_ERROR_GPU_NOT_FOUND
    assert "NO_GPUS" in str(error)
    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
    assert pynvml.nvmlDeviceGetCount() == 0
    assert pynvml.nvmlSystemGetDriverVersion() == "580.65.06"


def test_missing_state_is_driver_not_loaded(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere" / "state.nvmlmock"
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(missing))
    error = init_error(pynvml)
    assert error.value == NVML_ERROR_DRIVER_NOT_LOADED
    assert str(missing) in str(error)
    assert "No such file or directory" in str(error)


def test_unreadable_state(pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(tmp_path))  # a directory
    error = init_error(pynvml)
    assert error.value == NVML_ERROR_DRIVER_NOT_LOADED
    assert "not a regular file" in str(error)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("nvml-mock-state 2\n", "not a state file"),
        ("nvml-mock-state 1\n[gpu 0]\n", "[gpu 0] before [system]"),
        (
            "nvml-mock-state 1\n[system]\ndriver_version=1\n",
            "required key 'nvml_version' is missing",  # the first missing, in keys.toml's order
        ),
        ("nvml-mock-state 1\nname=x\n", "key 'name' outside a section"),
        (
            "nvml-mock-state 1\n[system]\ndevice_count=65\n",
            "key 'device_count': '65' is not an integer in 0..64",
        ),
        ("nvml-mock-state 1\n[system]\ndevice_count=1\ndevice_count=1\n", "appears twice"),
        ("nvml-mock-state 1\n[system]\nx" + "y" * 1100 + "\n", "line longer than 1023 bytes"),
        ("nvml-mock-state 1\n[system]\nBad=1\n", "key of [a-z0-9_]"),
    ],
)
def test_corrupt_state_names_the_line(
    pynvml: Any, write_state: StateWriter, text: str, message: str
) -> None:
    path = write_state(text=text)
    error = init_error(pynvml)
    assert error.value == NVML_ERROR_INVALID_STATE
    assert str(path) in str(error)
    assert message in str(error)


def test_corrupt_gpu_value_names_gpu_line_and_key(pynvml: Any, write_state: StateWriter) -> None:
    gpus = [gpu_entry(0), gpu_entry(1, memory_total_bytes="80GB")]
    write_state(gpus=gpus)
    text = str(init_error(pynvml))
    line = next(
        i + 1
        for i, row in enumerate(render_state(SYSTEM, gpus).splitlines())
        if row.startswith("memory_total_bytes=80GB")
    )
    assert (
        f"line {line}: key 'memory_total_bytes': '80GB' is not an unsigned 64-bit integer" in text
    )


@pytest.mark.parametrize(
    "value", ["18446744073709551615", "0xFFFFFFFFFFFFFFFF", "9223372036854775808"]
)
def test_u64_keys_take_the_whole_unsigned_range(
    value: str, pynvml: Any, write_state: StateWriter
) -> None:
    write_state(count=1, energy_mj=value)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) == int(value, 0)


@pytest.mark.parametrize("value", ["18446744073709551616", "0x10000000000000000", "-1"])
def test_u64_keys_refuse_values_past_the_range(
    value: str, pynvml: Any, write_state: StateWriter
) -> None:
    write_state(count=1, energy_mj=value)
    assert f"key 'energy_mj': '{value}' is not an unsigned 64-bit integer" in str(
        init_error(pynvml)
    )


def test_missing_required_gpu_key(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=[gpu_entry(0, uuid=None)])
    assert "[gpu 0]: required key 'uuid' is missing" in str(init_error(pynvml))


def test_device_count_mismatch(pynvml: Any, write_state: StateWriter) -> None:
    write_state(system={"device_count": 3}, gpus=[gpu_entry(0)])
    assert "device_count=3 but 1 [gpu N] sections" in str(init_error(pynvml))


def test_duplicate_uuid_is_refused(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=[gpu_entry(0), gpu_entry(1, uuid=gpu_entry(0)["uuid"])])
    assert "[gpu 1]: uuid duplicates [gpu 0]" in str(init_error(pynvml))


def test_unknown_keys_are_ignored(pynvml: Any, write_state: StateWriter) -> None:
    write_state(count=1, some_future_key="value")
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_error_detail_clears_after_a_good_init(pynvml: Any, write_state: StateWriter) -> None:
    write_state(text="garbage\n")
    init_error(pynvml)
    assert pynvml.nvmlErrorString(NVML_ERROR_INVALID_STATE).startswith(
        "Invalid state: corrupt GPU state "
    )
    write_state()
    pynvml.nvmlInit()
    assert pynvml.nvmlErrorString(NVML_ERROR_INVALID_STATE) == "Invalid state"


# nvmlErrorString as the real library answers: the texts nvidia-smi prints after "Failed to
# initialize NVML: " and in -q reports (the A100 capture shows the deprecated one), and
# NVIDIA's DCGM table of the library's strings.
REAL_ERROR_STRINGS = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires reset",
    17: "GPU access blocked by the operating system",
    18: "Driver/library version mismatch",
    19: "In use by another client",
    20: "Insufficient Memory",
    23: "Insufficient Resources",
    26: "Requested functionality has been deprecated",
    999: "Unknown Error",
}


def test_error_string_for_every_code(cnvml: ctypes.CDLL) -> None:
    cnvml.nvmlErrorString.restype = ctypes.c_char_p
    strings = {code: cnvml.nvmlErrorString(code) for code in [*range(31), 999, 12345, -1]}
    assert all(isinstance(s, bytes) and s for s in strings.values())
    for code, text in REAL_ERROR_STRINGS.items():
        assert strings[code] == text.encode(), code
    assert strings[25] == b"Argument version mismatch"
    assert strings[12345] == b"Unknown Error"
    assert len(set(strings[c] for c in range(31))) == 31


def test_deprecated_reads_as_the_real_tool_prints_it(nvml: Any) -> None:
    # nvidia-ml-py has no text of its own for 26 and asks the library
    assert str(nvml.NVMLError(26)) == "Requested functionality has been deprecated"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MOCK_FABRIC_CLUSTER_UUID", "not-a-uuid"),
        ("MOCK_FABRIC_CLUSTER_UUID", "6a5f6f1c51a84b8c9d0e1f2a3b4c5d6e"),
        ("MOCK_FABRIC_CLIQUE_ID", "-1"),
        ("MOCK_FABRIC_CLIQUE_ID", "4294967296"),
        ("MOCK_FABRIC_CLIQUE_ID", "seven"),
    ],
)
def test_bad_fabric_env_fails_init_naming_it(
    pynvml: Any, write_state: StateWriter, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    write_state()
    monkeypatch.setenv(name, value)
    error = init_error(pynvml)
    assert error.value == NVML_ERROR_INVALID_STATE
    assert f"{name}='{value}'" in str(error)


def test_state_found_next_to_the_library(library_file: Path, tmp_path: Path) -> None:
    """Without MOCK_NVML_CONFIG the library reads <dir of .so>/../config/state.nvmlmock."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "config").mkdir()
    shutil.copy(library_file, tmp_path / "lib" / "libnvidia-ml.so.1")
    (tmp_path / "config" / "state.nvmlmock").write_text(
        render_state(SYSTEM, [gpu_entry(i) for i in range(3)])
    )
    script = textwrap.dedent(
        """
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(2)
        print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(handle))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    env["LD_LIBRARY_PATH"] = str(tmp_path / "lib")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "3 NVIDIA H100 80GB HBM3"


def test_default_location_missing_is_reported(library_file: Path, tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    shutil.copy(library_file, tmp_path / "lib" / "libnvidia-ml.so.1")
    script = textwrap.dedent(
        """
        import pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            print(e.value, pynvml.nvmlErrorString(e.value))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    env["LD_LIBRARY_PATH"] = str(tmp_path / "lib")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    # every place looked at is named: the overlay's lib/, a driver root's usr/lib64 and
    # usr/lib/<triplet>, and the overlay injected at its mount path
    assert out.stdout.startswith("9 Driver Not Loaded: no GPU state in ")
    for place in ("/..", "/../..", "/../../.."):
        assert f"{tmp_path}/lib{place}/config/state.nvmlmock" in out.stdout
    assert "/opt/nvml-mock/config/state.nvmlmock (set MOCK_NVML_CONFIG)" in out.stdout


def test_a_fifo_as_the_state_fails_init_at_once_instead_of_blocking(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a FIFO for reading blocks until a writer comes; init holds its lock meanwhile,
    so every other thread's init would hang too. It must fail, naming the file."""
    fifo = tmp_path / "state.nvmlmock"
    os.mkfifo(fifo)
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(fifo))
    done = subprocess.run(
        [sys.executable, "-c", INIT_ONCE, str(os.environ.get("NVML_MOCK_TEST_LIBRARY", ""))],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "MOCK_NVML_CONFIG": str(fifo)},
    )
    assert done.stdout.split("\t")[0] == str(NVML_ERROR_DRIVER_NOT_LOADED), done
    assert f"GPU state {fifo} is not a regular file" in done.stdout


INIT_ONCE = textwrap.dedent(
    """
    import ctypes, sys
    from nvml_mock_engine.library import library_path
    lib = ctypes.CDLL(sys.argv[1] or str(library_path()))
    lib.nvmlErrorString.restype = ctypes.c_char_p
    rc = lib.nvmlInit_v2()
    print(rc, lib.nvmlErrorString(rc).decode(), sep="\\t")
    """
)


@pytest.mark.parametrize(
    "raw", [b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"ok\xe2\x82"]
)
def test_a_string_that_is_not_utf8_is_refused_naming_line_and_key(
    pynvml: Any, write_state: StateWriter, raw: bytes
) -> None:
    path = write_state()
    text = path.read_bytes().replace(b"serial=1653220300000", b"serial=" + raw, 1)
    assert raw in text
    path.write_bytes(text)
    failure = init_error(pynvml)
    assert failure.value == NVML_ERROR_INVALID_STATE
    assert "key 'serial': value is not valid UTF-8" in failure.text
    assert "line " in failure.text


def test_valid_multibyte_utf8_is_accepted(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=[gpu_entry(0, board_part_number="699-Ü€𝄞")])
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetBoardPartNumber(pynvml.nvmlDeviceGetHandleByIndex(0)) == "699-Ü€𝄞"
