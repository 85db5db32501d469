"""The live layer: values written on the node reach running NVML clients on their next call.

Through unmodified nvidia-ml-py bound to the real library, the real writer
(:mod:`nvml_mock_live.layer`), real child processes, and a real read-only bind mount in a
private mount namespace (as containers see the overlay).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, needs_mount_namespaces, read_only_bind
from nvml_mock_engine.errors import LiveLayerError, LiveValueError
from nvml_mock_engine.schema import LIVE_GPU_KEYS
from nvml_mock_live import _layout as _live_layout

NVML_ERROR_INVALID_STATE = 29


def make_live(state: Path) -> Path:
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


def detail(pynvml: Any) -> str:
    text: str = pynvml.nvmlErrorString(NVML_ERROR_INVALID_STATE)
    return text


def test_without_a_live_file_the_board_answers(pynvml: Any, write_state: StateWriter) -> None:
    write_state()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
    assert detail(pynvml) == "Invalid state"


def test_a_live_value_wins_on_the_next_call_and_clear_restores_the_board(
    pynvml: Any, live_state: Path
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    other = pynvml.nvmlDeviceGetHandleByIndex(0)
    with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
        before = layer.generation
        layer.set(1, {"temperature_c": 93, "memory_used_bytes": 20 << 30, "pstate": 2})
        assert layer.generation == before + 1
        assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 93
        assert pynvml.nvmlDeviceGetTemperature(other, 0) == 31
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert info.used == 20 << 30
        assert info.free == info.total - info.used - info.reserved
        assert pynvml.nvmlDeviceGetPerformanceState(handle) == 2
        assert layer.values(1) == {"memory_used_bytes": 20 << 30, "temperature_c": 93, "pstate": 2}
        layer.clear(1, ["temperature_c"])
        assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
        assert pynvml.nvmlDeviceGetPerformanceState(handle) == 2
        layer.clear(1)
        assert layer.values(1) == {}
        assert pynvml.nvmlDeviceGetPerformanceState(handle) == 0


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("temperature_c", 201, "0..200"),
        ("util_gpu_pct", -1, "0..100"),
        ("pstate", 16, "0..15"),
        ("name", "x", "board-only"),
        ("no_such_key", 1, "not a key of the device model"),
        ("memory_used_bytes", 85520809984, "the board's room"),
        ("ecc_enabled", "yes", "0/1"),
    ],
)
def test_a_bad_value_is_refused_naming_key_and_value_and_nothing_is_written(
    live_state: Path, key: str, value: object, reason: str
) -> None:
    with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
        layer.set(0, {"temperature_c": 50})
        before = layer.generation
        with pytest.raises(LiveValueError) as caught:
            layer.set(0, {"fan_speed_pct": 40, key: value})
        assert str(caught.value).startswith(f"{key}={value!r}: ")
        assert reason in str(caught.value)
        assert layer.generation == before
        assert layer.values(0) == {"temperature_c": 50}


def test_a_gpu_outside_the_board_is_refused(live_state: Path) -> None:
    with (
        live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer,
        pytest.raises(LiveValueError, match=r"gpu=2: is not a GPU of this node \(0\.\.1\)"),
    ):
        layer.set(2, {"temperature_c": 50})


def test_every_live_key_reaches_the_library_clamped_to_its_bounds(
    cnvml: Any, pynvml: Any, live_state: Path
) -> None:
    """Each live key set to a distinctive value is what its getter's slot answers: the
    layout in C and Python is the same, slot by slot (read back through the snapshot the
    library takes, and the values through nvidia-ml-py for a sample of getters)."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
        wanted = {}
        for key, spec in LIVE_GPU_KEYS.items():
            low = spec.minimum if spec.minimum is not None else 0
            high = spec.maximum if spec.maximum is not None else 1
            wanted[key] = high if spec.kind.value == "flag" else max(low, min(high, low + 1))
        wanted["gpu_lost"] = 0  # set, but not lost: the getters below must answer
        # set, but no clock lock: the clocks below must answer as set
        wanted["locked_gpu_clock_max_mhz"] = wanted["locked_mem_clock_max_mhz"] = 0
        wanted["memory_used_bytes"] = 3 << 30
        wanted["temperature_c"] = 77
        wanted["clock_sm_mhz"] = 1755
        wanted["power_usage_mw"] = 456789
        wanted["fan_speed_pct"] = 61
        wanted["ecc_volatile_uncorrected"] = 12
        wanted["pcie_replay_counter"] = 9
        wanted["clocks_event_reasons"] = 0x40
        layer.set(0, wanted)
        assert layer.values(0) == wanted
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 77
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) == 1755
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 456789
    assert pynvml.nvmlDeviceGetPcieReplayCounter(handle) == 9
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0x40
    assert (
        pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        == 12
    )
    assert pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used == 3 << 30


def _header_field(path: Path, name: str, value: int) -> None:
    import struct

    ctype, offset = _live_layout.LIVE_HEADER_FIELDS[name]
    data = bytearray(path.read_bytes())
    struct.pack_into("<I" if ctype == "uint32_t" else "<Q", data, offset, value)
    path.write_bytes(bytes(data))


def _corrupt(kind: str, path: Path) -> str:
    """Damage the live file at *path* one way; returns what the reason must say."""
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[:4096])
        return "size 4096 bytes, the layout needs"
    if kind == "magic":
        data = bytearray(path.read_bytes())
        data[0:4] = b"JUNK"
        path.write_bytes(bytes(data))
        return "bad magic"
    if kind == "format":
        _header_field(path, "format", 99)
        return "format differs"
    if kind == "layout":
        _header_field(path, "record_bytes", 64)
        return "layout differs"
    if kind == "stale":
        data = bytearray(path.read_bytes())
        start = _live_layout.LIVE_RECORDS_OFFSET + _live_layout.LIVE_RECORD_UUID
        data[start : start + 4] = b"GPU-"[::-1]
        path.write_bytes(bytes(data))
        return "belongs to another GPU"
    if kind == "retired":
        _header_field(path, "retired", 1)
        return "retired"
    if kind == "fifo":
        path.unlink()
        os.mkfifo(path)
        return "not a regular file"
    if kind == "directory":
        path.unlink()
        path.mkdir()
        return "not a regular file"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["truncated", "magic", "format", "layout", "stale", "retired", "fifo", "directory"]
)
def test_a_bad_live_file_is_ignored_with_the_reason_and_the_board_answers(
    pynvml: Any, live_state: Path, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    with live.LiveLayer.open(path) as layer:
        layer.set(0, {"temperature_c": 99})
    reason = _corrupt(kind, path)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
    text = detail(pynvml)
    assert text.startswith(f"Invalid state: live layer {path} ignored (board values stand): ")
    assert reason in text
    assert f"nvml-mock: live layer {path} ignored" in capfd.readouterr().err
    if kind in ("truncated", "magic"):  # damaged in place: read-only refused, a writer repairs
        with pytest.raises(LiveLayerError, match=r"in place\); a writer .* repairs it"):
            live.LiveLayer.open(path, writable=False)
        with live.LiveLayer.open(path) as layer:
            assert layer.values(0) == {}
    elif kind not in ("fifo", "directory"):
        with pytest.raises(LiveLayerError, match=r"cannot be used|layout needs"):
            live.LiveLayer.open(path)


def test_a_reinit_after_a_good_file_returns_clears_the_reason(
    pynvml: Any, live_state: Path
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    saved = path.read_bytes()
    path.write_bytes(b"x")
    pynvml.nvmlInit()
    assert "ignored" in detail(pynvml)
    pynvml.nvmlShutdown()
    path.write_bytes(saved)
    pynvml.nvmlInit()
    assert detail(pynvml) == "Invalid state"


def test_replacing_the_file_retires_the_old_one_for_processes_that_mapped_it(
    pynvml: Any, live_state: Path
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    with live.LiveLayer.open(path) as layer:
        layer.set(0, {"temperature_c": 88})
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 88
    make_live(live_state)  # a re-stage that had to write a fresh file
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31


def test_a_writer_that_died_mid_write_leaves_the_board_value_and_no_hang(
    pynvml: Any, live_state: Path
) -> None:
    import struct

    path = live_state.parent / live.LIVE_FILE_NAME
    with live.LiveLayer.open(path) as layer:
        layer.set(0, {"temperature_c": 66})
    data = bytearray(path.read_bytes())
    seq_at = _live_layout.LIVE_RECORDS_OFFSET + _live_layout.LIVE_RECORD_SEQ
    struct.pack_into("<Q", data, seq_at, struct.unpack_from("<Q", data, seq_at)[0] + 1)
    path.write_bytes(bytes(data))  # same inode: the sequence is left odd, as by a crash
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
    with live.LiveLayer.open(path) as layer:  # the next writer repairs the record
        layer.set(0, {"temperature_c": 67})
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 67


READER = textwrap.dedent(
    """
    import ctypes, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("ready", pynvml.nvmlDeviceGetTemperature(handle, 0), flush=True)
    for line in sys.stdin:
        rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
        print(pynvml.nvmlDeviceGetTemperature(handle, 0), rates.gpu, flush=True)
    """
)


def _reader(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ask(proc: subprocess.Popen[str]) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("?\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_a_change_reaches_a_process_that_initialised_before_it(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    script = tmp_path / "reader.py"
    script.write_text(READER)
    env = dict(os.environ, MOCK_NVML_CONFIG=str(live_state))
    proc = _reader([sys.executable, str(script), str(library_file)], env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["ready", "31"]
        with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
            layer.set(0, {"temperature_c": 85, "util_gpu_pct": 100})
            assert _ask(proc) == "85 100"
            layer.clear(0)
            assert _ask(proc) == "31 0"
    finally:
        proc.kill()
        proc.communicate()


@needs_mount_namespaces
def test_a_change_reaches_a_reader_through_a_read_only_bind_mount(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    """As in a container: the overlay's config is bind-mounted read-only at another path in a
    private mount namespace, the reader loads the state from there, the node writes the
    host path, and the reader sees it on its next call; writing from inside is refused."""
    script = tmp_path / "reader.py"
    script.write_text(READER)
    mount = tmp_path / "mnt"
    mount.mkdir()
    host = live_state.parent
    inner = read_only_bind(host, mount) + f"exec {sys.executable} {script} {library_file}"
    env = dict(os.environ, MOCK_NVML_CONFIG=str(mount / live_state.name))
    proc = _reader(["unshare", "-m", "--propagation", "private", "sh", "-c", inner], env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first == ["ready", "31"], proc.stderr.read() if proc.stderr else first
        with live.LiveLayer.open(host / live.LIVE_FILE_NAME) as layer:
            layer.set(0, {"temperature_c": 90, "util_gpu_pct": 55})
            assert _ask(proc) == "90 55"
    finally:
        proc.kill()
        proc.communicate()
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            read_only_bind(host, mount)
            + f'exec {sys.executable} -c "import nvml_mock_live as live; '
            f"live.LiveLayer.open('{mount}/{live.LIVE_FILE_NAME}')\"",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 1
    assert "Read-only file system (the live layer is written on the node" in probe.stderr


def test_armed_values_without_a_trigger_apply_at_once(pynvml: Any, live_state: Path) -> None:
    """An unset fault_trigger is "now" (its slot's stale value is not read)."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
        layer.set(0, {"fault_trigger": 1, "fault_trigger_param": 1000})
        layer.clear(0, ["fault_trigger"])
        layer.set(0, {"temperature_c": 97}, armed=True)
        assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 97
