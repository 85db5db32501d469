"""``nvml-mock-ctl``: every verb writes the live layer, and NVML answers with what it wrote.

The command runs for real (``main`` in-process, and as a child process through ``python -m``
and a read-only bind mount), on a real live file; what it wrote is read back through the
writer (values, armed keys, the event ring) and, for the board-backed keys, through
nvidia-ml-py bound to the built library. The C behaviour of the live-only fault keys
(``gpu_lost``, the NVLink keys, ``recovery_action``, utilization patterns) and the delivery of
events to waiters are tested where the library implements them; here the command's part is
what it writes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, gpu_entry, needs_mount_namespaces, read_only_bind
from nvml_mock_engine import ctl, faults
from nvml_mock_engine.schema import LIVE_GPU_KEYS
from nvml_mock_live.vocabulary import UTIL_PATTERNS
from nvml_mock_protocol import names


@pytest.fixture
def live_file(write_state: StateWriter) -> Path:
    """Two H100-like GPUs (18 NVLinks, fabric-attached) and a fresh live layer beside them."""
    state = write_state()
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


def run(live_file: Path, *argv: str) -> int:
    return ctl.main(["--live-file", str(live_file), *argv])


def values(live_file: Path, gpu: int) -> dict[str, int]:
    with live.LiveLayer.open(live_file) as layer:
        return layer.values(gpu)


def events(live_file: Path) -> list[tuple[int, int, int]]:
    with live.LiveLayer.open(live_file) as layer:
        return [(e.gpu, e.event_type, e.data) for e in layer.events()]


def generation(live_file: Path) -> int:
    with live.LiveLayer.open(live_file) as layer:
        return layer.generation


VERBS: list[tuple[list[str], dict[str, int]]] = [
    (["temp", "91", "--memory", "77"], {"temperature_c": 91, "memory_temperature_c": 77}),
    (["power", "350.5", "--limit", "400W"], {"power_usage_mw": 350500, "power_limit_mw": 400000}),
    (["power", "250000mW"], {"power_usage_mw": 250000}),
    (["util", "75", "--memory", "40"], {"util_gpu_pct": 75, "util_mem_pct": 40}),
    (
        ["clocks", "--sm", "1500", "--graphics", "1400", "--mem", "2000", "--video", "1000"],
        {
            "clock_sm_mhz": 1500,
            "clock_graphics_mhz": 1400,
            "clock_mem_mhz": 2000,
            "clock_video_mhz": 1000,
        },
    ),
    (["throttle", "sw-power-cap,hw-slowdown"], {"clocks_event_reasons": 0x4 | 0x8}),
    (["throttle", "none"], {"clocks_event_reasons": 0}),
    (["pstate", "P2"], {"pstate": 2}),
    (
        [
            "ecc",
            "--volatile-corrected",
            "5",
            "--aggregate-uncorrected",
            "7",
            "--remapped-pending",
            "1",
            "--mode",
            "off",
        ],
        {
            "ecc_volatile_corrected": 5,
            "ecc_aggregate_uncorrected": 7,
            "remapped_rows_pending": 1,
            "ecc_enabled": 0,
        },
    ),
    (
        ["nvlink", "--down", "2,5", "--crc", "10", "--replay", "3", "--recovery", "1"],
        {
            "nvlink_down_mask": 0b100100,
            "nvlink_crc_errors": 10,
            "nvlink_replay_errors": 3,
            "nvlink_recovery_errors": 1,
        },
    ),
    (
        ["fabric-health", "--route-unhealthy", "yes", "--state", "in-progress"],
        {"fabric_health_mask": 0x1AA & ~0x30 | 0x10, "fabric_state": 2},
    ),
    (["fabric-health", "--incorrect-configuration", "chassis-sn"], {"fabric_health_mask": 0x3AA}),
    (["recovery-action", "drain-and-reset"], {"recovery_action": 4}),
    (["recovery-action", "node-reboot"], {"recovery_action": 2}),
    (
        ["set", "fan_speed_pct=61", "gpu_lost=true", "pcie_replay_counter=0x10"],
        {"fan_speed_pct": 61, "gpu_lost": 1, "pcie_replay_counter": 16},
    ),
]


@pytest.mark.parametrize(("argv", "expected"), VERBS, ids=[" ".join(v[0]) for v in VERBS])
def test_each_verb_writes_its_keys_on_the_chosen_gpu_only(
    live_file: Path, argv: list[str], expected: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(live_file, *argv, "-i", "1") == ctl.EXIT_OK
    assert values(live_file, 1) == expected
    assert values(live_file, 0) == {}
    out = capsys.readouterr().out
    assert out.startswith("GPU 1 GPU-01000100-1111-2222-3333-000000000001: ")


def test_board_backed_values_reach_a_running_nvml_client(pynvml: Any, live_file: Path) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
    assert run(live_file, "temp", "84", "-i", "0") == 0
    assert run(live_file, "clocks", "--sm", "1200", "-i", "0") == 0
    assert run(live_file, "power", "512", "-i", "0") == 0
    assert run(live_file, "pstate", "3", "-i", "0") == 0
    assert run(live_file, "util", "66", "-i", "0") == 0
    assert run(live_file, "throttle", "sw-thermal-slowdown", "-i", "0") == 0
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 84
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) == 1200
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 512000
    assert pynvml.nvmlDeviceGetPerformanceState(handle) == 3
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 66
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0x20
    assert run(live_file, "reset", "-i", "0") == 0
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 31
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) == 345


def test_util_patterns_write_the_pattern_keys(live_file: Path) -> None:
    assert run(live_file, "util", "sine", "80", "--period", "30s", "--seed", "7", "-i", "0") == 0
    got = values(live_file, 0)
    epoch = got.pop("util_pattern_epoch_ms")
    assert abs(epoch - datetime.now(UTC).timestamp() * 1000) < 60_000
    assert got == {
        "util_pattern": UTIL_PATTERNS["sine"],
        "util_pattern_level": 80,
        "util_pattern_period_ms": 30000,
        "util_pattern_seed": 7,
    }
    assert run(live_file, "util", "steady", "60", "-i", "0") == 0
    assert values(live_file, 0)["util_pattern_level"] == 60
    assert run(live_file, "util", "idle", "-i", "0") == 0
    assert {k: values(live_file, 0)[k] for k in ("util_pattern", "util_pattern_level")} == {
        "util_pattern": UTIL_PATTERNS["steady"],
        "util_pattern_level": 0,
    }
    assert run(live_file, "util", "busy", "--period", "500ms", "-i", "0") == 0
    got = values(live_file, 0)
    assert (got["util_pattern"], got["util_pattern_level"], got["util_pattern_period_ms"]) == (
        UTIL_PATTERNS["busy"],
        100,
        500,
    )
    assert run(live_file, "util", "burst", "-i", "0") == 0
    assert values(live_file, 0)["util_pattern"] == UTIL_PATTERNS["burst"]
    # a plain percentage drops the pattern, so the value answers
    assert run(live_file, "util", "20", "-i", "0") == 0
    assert values(live_file, 0) == {"util_gpu_pct": 20}


def test_xid_sends_the_event_and_writes_no_value(live_file: Path) -> None:
    assert run(live_file, "xid", "43", "-i", "1") == 0
    assert events(live_file) == [(1, faults.EVENT_XID, 43)]
    assert values(live_file, 1) == {}


def test_fail_fallen_off_bus_marks_the_gpu_lost_then_sends_xid_79(
    pynvml: Any, live_file: Path
) -> None:
    assert run(live_file, "fail", "fallen-off-bus", "-i", "0") == 0
    assert values(live_file, 0) == {"gpu_lost": 1}
    assert events(live_file) == [(0, faults.EVENT_XID, 79)]
    assert run(live_file, "fail", "lost", "-i", "1") == 0
    assert values(live_file, 1) == {"gpu_lost": 1}
    assert len(events(live_file)) == 1


def test_fail_ecc_uncorrectable_grows_counters_visible_through_nvml(
    pynvml: Any, live_file: Path
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for _ in range(2):
        assert run(live_file, "fail", "ecc-uncorrectable", "--count", "3", "-i", "0") == 0
    got = values(live_file, 0)
    assert got["ecc_volatile_uncorrected"] == 6
    assert got["remapped_rows_uncorrectable"] == 6
    assert (
        pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        == 6
    )
    _corrected, uncorrected, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
    assert (uncorrected, pending, failure) == (6, 1, 0)
    xids = [e[2] for e in events(live_file) if e[1] == faults.EVENT_XID]
    assert xids == [94, 63, 94, 63]


def test_fail_thermal_is_hot_throttled_and_slow_through_nvml(pynvml: Any, live_file: Path) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert run(live_file, "fail", "thermal", "-i", "1") == 0
    slowdown = pynvml.nvmlDeviceGetTemperatureThreshold(
        handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    )
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) > slowdown
    reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert reasons & 0x40 and reasons & 0x20
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) <= 1980 // 2


def test_fail_nvlink_down_and_fabric_degraded_write_their_masks(live_file: Path) -> None:
    assert run(live_file, "fail", "nvlink-down", "--link", "3,4", "--count", "5", "-i", "0") == 0
    got = values(live_file, 0)
    assert got["nvlink_down_mask"] == 0b11000
    assert got["nvlink_crc_errors"] == 5
    assert events(live_file) == [(0, faults.EVENT_XID, 74)]
    assert run(live_file, "fail", "fabric-degraded", "-i", "0") == 0
    assert values(live_file, 0)["fabric_health_mask"] == 0x1A9


@pytest.mark.parametrize(
    "spec",
    ["1", "GPU-01000100-1111-2222-3333-000000000001", "gpu-01000100-1111-2222-3333-000000000001"],
)
def test_a_gpu_by_index_or_uuid(live_file: Path, spec: str) -> None:
    assert run(live_file, "temp", "70", "-i", spec) == 0
    assert values(live_file, 1) == {"temperature_c": 70}
    assert values(live_file, 0) == {}


@pytest.mark.parametrize("spec", ["all", "0,1", "1,GPU-01000100-1111-2222-3333-000000000000"])
def test_several_gpus(live_file: Path, spec: str) -> None:
    assert run(live_file, "temp", "70", "--gpu", spec) == 0
    assert values(live_file, 0) == values(live_file, 1) == {"temperature_c": 70}


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["temp", "201", "-i", "0"], "temperature_c=201"),
        (["temp", "hot", "-i", "0"], "temperature_c='hot'"),
        (["set", "fan_speed_pct=40", "name=x", "-i", "0"], "name='x'"),
        (["set", "fan_speed_pct=40", "nope=1", "-i", "0"], "nope=1"),
        (["set", "fault_trigger=1", "-i", "0"], "fault_trigger='1'"),
        (["clocks", "--sm", "5000", "-i", "0"], "clock_sm_mhz=5000"),
        (["throttle", "sleepy", "-i", "0"], "clocks_event_reasons='sleepy'"),
        (["recovery-action", "pray", "-i", "0"], "recovery_action='pray'"),
        (["fail", "nvlink-down", "--link", "18", "-i", "0"], "link=18"),
        (["fail", "thermal", "--temp", "50", "-i", "0"], "temperature_c=50"),
        (["fail", "fabric-degraded", "--reason", "gremlins", "-i", "0"], "reason='gremlins'"),
        (["fail", "lost", "--probability", "1.5", "-i", "0"], "probability='1.5'"),
        (["fail", "lost", "--at", "tomorrow", "-i", "0"], "at='tomorrow'"),
        (
            ["fail", "lost", "--at", "99999999999999", "-i", "0"],
            "at='99999999999999': must be a time before",
        ),
        (["fail", "thermal", "--at", "253402300800", "-i", "0"], "at='253402300800'"),
        (["xid", "0", "-i", "0"], "xid='0'"),
        (["temp", "50", "-i", "7"], "gpu='7'"),
        (["temp", "50", "-i", "GPU-00000000-0000-0000-0000-000000000000"], "gpu='GPU-0000"),
        (["util", "sine", "101", "-i", "0"], "util='sine 101'"),
        (["util", "sine", "--period=-5s", "-i", "0"], "period='-5s'"),
        (["power", "lots", "-i", "0"], "power_usage_mw='lots'"),
        (["reset", "nope", "-i", "0"], "nope=None"),
    ],
)
def test_a_bad_value_exits_3_naming_key_and_value_and_writes_nothing(
    live_file: Path, argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(live_file, "temp", "40", "-i", "all") == 0
    before = generation(live_file)
    assert run(live_file, *argv) == ctl.EXIT_VALUE
    err = capsys.readouterr().err
    assert "refused, nothing written: " + named in err
    assert generation(live_file) == before
    assert values(live_file, 0) == values(live_file, 1) == {"temperature_c": 40}
    assert events(live_file) == []


def test_a_value_bad_on_one_gpu_writes_no_gpu(
    write_state: StateWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    state = write_state(gpus=[gpu_entry(0), gpu_entry(1, nvlink_count=4)])
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    assert run(path, "fail", "nvlink-down", "--link", "6", "-i", "all") == ctl.EXIT_VALUE
    assert "link=6: the GPU's links are 0..3 (GPU 1)" in capsys.readouterr().err
    assert values(path, 0) == values(path, 1) == {}
    assert events(path) == []


def test_usage_errors_exit_2(live_file: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        run(live_file, "temp", "50")  # -i is required for a change
    assert caught.value.code == ctl.EXIT_USAGE
    assert run(live_file, "clocks", "-i", "0") == ctl.EXIT_USAGE
    assert run(live_file, "set", "novalue", "-i", "0") == ctl.EXIT_USAGE
    assert values(live_file, 0) == {}


def test_a_missing_live_layer_exits_1_with_the_reason(
    write_state: StateWriter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_state()
    assert run(tmp_path / live.LIVE_FILE_NAME, "temp", "50", "-i", "0") == ctl.EXIT_FAILURE
    err = capsys.readouterr().err
    assert (
        f"cannot open the live layer {tmp_path / live.LIVE_FILE_NAME}: No such file or directory"
        in err
    )
    assert "stage the overlay" in err


def test_an_unstaged_overlay_exits_1_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ctl.main(["--overlay-path", str(tmp_path / "nowhere"), "status"]) == ctl.EXIT_FAILURE
    err = capsys.readouterr().err
    assert "no board state" in err and f"is the overlay {tmp_path / 'nowhere'} staged?" in err


def _overlay(state: Path, root: Path) -> Path:
    config = root / "config"
    config.mkdir(parents=True)
    shutil.copy(state, config / "state.nvmlmock")
    live.create(config / live.LIVE_FILE_NAME, live.read_board(config / "state.nvmlmock"))
    return root


def test_the_overlay_path_flag_and_its_env_twin(
    write_state: StateWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay = _overlay(write_state(), tmp_path / "overlay")
    monkeypatch.delenv("MOCK_NVML_CONFIG")
    config = overlay / "config" / live.LIVE_FILE_NAME
    assert ctl.main(["--overlay-path", str(overlay), "temp", "55", "-i", "0"]) == 0
    assert values(config, 0) == {"temperature_c": 55}
    monkeypatch.setenv(names.ENV_OVERLAY_HOST_PATH, str(overlay))
    assert ctl.main(["temp", "56", "-i", "0"]) == 0
    assert values(config, 0) == {"temperature_c": 56}
    assert (
        ctl.main(["temp", "57", "-i", "0", "--overlay-path", str(tmp_path / "elsewhere")])
        == ctl.EXIT_FAILURE
    )


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads a 0444 file writable; see the bind-mount test"
)
def test_a_live_layer_without_write_permission_exits_1(
    live_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live_file.chmod(0o444)
    assert run(live_file, "temp", "50", "-i", "0") == ctl.EXIT_FAILURE
    assert "Permission denied" in capsys.readouterr().err
    assert run(live_file, "status") == 0


@needs_mount_namespaces
def test_a_read_only_overlay_exits_1_saying_it_is_written_on_the_node(
    write_state: StateWriter, tmp_path: Path
) -> None:
    """As inside a container: the overlay is a read-only bind mount; `status` still reads it."""
    overlay = _overlay(write_state(), tmp_path / "overlay")
    mount = tmp_path / "mnt"
    mount.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MOCK_NVML_CONFIG"}

    def inside(*argv: str) -> subprocess.CompletedProcess[str]:
        command = " ".join(
            [sys.executable, "-m", "nvml_mock_engine.ctl", "--overlay-path", str(mount), *argv]
        )
        script = read_only_bind(overlay, mount) + f"exec {command}"
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )

    denied = inside("temp", "50", "-i", "0")
    assert denied.returncode == ctl.EXIT_FAILURE, denied.stderr
    assert "Read-only file system (the live layer is written on the node" in denied.stderr
    shown = inside("status")
    assert shown.returncode == 0, shown.stderr
    assert "board" in shown.stdout
    assert values(overlay / "config" / live.LIVE_FILE_NAME, 0) == {}


def test_status_table_and_json(live_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(live_file, "status") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["GPU", "UUID", "STATE", "LIVE", "VALUES"]
    assert table[1].split() == ["0", "GPU-01000100-1111-2222-3333-000000000000", "board", "-"]
    assert run(live_file, "fail", "lost", "-i", "1") == 0
    assert run(live_file, "throttle", "hw-slowdown", "-i", "0") == 0
    assert run(live_file, "fail", "thermal", "-i", "0", "--after-calls", "5") == 0
    capsys.readouterr()
    assert run(live_file, "status") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[2] == "armed"
    assert "clocks_event_reasons=0x68*" in table[1]
    assert "(* when triggered: after 5 calls)" in table[1]
    assert table[2].split()[2:] == ["lost", "gpu_lost=1"]
    assert table[3].startswith(f"live layer {live_file}, generation ")
    assert run(live_file, "status", "--json", "-i", "1") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["live_file"] == str(live_file)
    assert document["gpus"] == [
        {
            "index": 1,
            "uuid": "GPU-01000100-1111-2222-3333-000000000001",
            "lost": True,
            "values": {"gpu_lost": 1},
            "armed": [],
            "trigger": None,
        }
    ]


def test_reset_one_gpu_some_keys_or_everything(live_file: Path) -> None:
    for gpu in ("0", "1"):
        assert run(live_file, "temp", "70", "--memory", "60", "-i", gpu) == 0
    assert run(live_file, "reset", "memory_temperature_c", "-i", "0") == 0
    assert values(live_file, 0) == {"temperature_c": 70}
    assert run(live_file, "reset", "-i", "1") == 0
    assert values(live_file, 1) == {}
    assert values(live_file, 0) == {"temperature_c": 70}
    assert run(live_file, "fail", "lost", "-i", "all") == 0
    assert run(live_file, "reset") == 0  # default: every GPU
    assert values(live_file, 0) == values(live_file, 1) == {}


def test_triggers_arm_the_fault_values_and_write_the_trigger(live_file: Path) -> None:
    assert run(live_file, "fail", "lost", "-i", "0", "--after-calls", "3") == 0
    with live.LiveLayer.open(live_file) as layer:
        got = layer.values(0)
        arm = got.pop("fault_trigger_arm")
        assert got == {
            "gpu_lost": 1,
            "fault_trigger": 1,
            "fault_trigger_param": 3,
            "fault_trigger_seed": 0,
        }
        assert 1 <= arm <= 0xFFFFFFFF
        assert layer.armed(0) == {"gpu_lost"}
        assert layer.events() == []  # `lost` sends no event
    assert (
        run(live_file, "fail", "fallen-off-bus", "-i", "1", "--probability", "0.25", "--seed", "9")
        == 0
    )
    got = values(live_file, 1)
    assert (got["fault_trigger"], got["fault_trigger_param"], got["fault_trigger_seed"]) == (
        2,
        250000,
        9,
    )
    first_arm = got["fault_trigger_arm"]
    with live.LiveLayer.open(live_file) as layer:  # its Xid 79 waits for the trigger too
        assert [(e.gpu, e.event_type, e.data, e.arm) for e in layer.events()] == [
            (1, 0x8, 79, first_arm)
        ]
    assert run(live_file, "fail", "lost", "-i", "1", "--at", "2030-01-02T03:04:05Z") == 0
    got = values(live_file, 1)
    assert (got["fault_trigger"], got["fault_trigger_param"]) == (3, 1893553445000)
    assert run(live_file, "set", "temperature_c=95", "-i", "1", "--at", "1893553445.5") == 0
    got = values(live_file, 1)
    assert got["fault_trigger_param"] == 1893553445500
    assert got["fault_trigger_arm"] == first_arm  # one trigger per GPU: one arm while it is set
    with live.LiveLayer.open(live_file) as layer:
        assert layer.armed(1) == {"gpu_lost", "temperature_c"}
    assert run(live_file, "reset", "-i", "1") == 0
    assert run(live_file, "fail", "lost", "-i", "1", "--after-calls", "1") == 0
    assert values(live_file, 1)["fault_trigger_arm"] != first_arm  # a reset ends the arm


def test_an_after_calls_trigger_fires_in_a_running_client(pynvml: Any, live_file: Path) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert run(live_file, "fail", "thermal", "--temp", "95", "-i", "0", "--after-calls", "2") == 0
    seen = [pynvml.nvmlDeviceGetTemperature(handle, 0) for _ in range(4)]
    assert seen == [31, 31, 95, 95]


def test_the_command_and_the_module_run(live_file: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MOCK_NVML_CONFIG"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvml_mock_engine.ctl",
            "--live-file",
            str(live_file),
            "status",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["gpus"]) == 2
    script = shutil.which("nvml-mock-ctl", path=str(Path(sys.executable).parent))
    if script is not None:
        proc = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and proc.stdout.startswith("nvml-mock-ctl ")


def test_every_live_key_can_be_set(live_file: Path) -> None:
    """`set` takes every live key (the triggers excepted: the trigger flags write them)."""
    assignments = []
    for key, spec in LIVE_GPU_KEYS.items():
        if key in live.vocabulary.TRIGGER_KEYS:
            continue
        low = spec.minimum if spec.minimum is not None else 0
        assignments.append(f"{key}={max(low, 1) if spec.maximum != 0 else 0}")
    assert run(live_file, "set", *assignments, "-i", "0") == 0
    assert len(values(live_file, 0)) == len(LIVE_GPU_KEYS) - len(live.vocabulary.TRIGGER_KEYS)


# -- allocations by hand ----------------------------------------------------------------

GiB = 1 << 30


def test_alloc_makes_gpus_busy_through_nvml_and_release_frees_them(
    pynvml: Any, live_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pynvml.nvmlInit()
    gpu0, gpu1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    board = pynvml.nvmlDeviceGetMemoryInfo(gpu0, version=pynvml.nvmlMemory_v2).used
    argv = ["alloc", "--pid", "4242", "--gpus", "0,1", "--memory", "20Gi"]
    argv += ["--utilization", "steady 60", "--name", "train", "--pod", "p1", "--namespace", "ml"]
    assert run(live_file, *argv) == ctl.EXIT_OK
    said = capsys.readouterr().out
    assert said.startswith("allocation ctl-4242: pid 4242 on GPU 0 GPU-") and "20480MiB" in said
    for handle in (gpu0, gpu1):
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 20 * GiB)]
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert info.used == board + 20 * GiB
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 60
    assert run(live_file, "alloc", "--pid", "77", "--gpus", "1", "--id", "job-b") == ctl.EXIT_OK
    capsys.readouterr()

    assert run(live_file, "status") == ctl.EXIT_OK
    table = capsys.readouterr().out.splitlines()
    assert table[3] == "allocations (2; memory is per GPU held)"
    assert table[4].split() == [
        "ID", "CONTAINER", "POD", "NAMESPACE", "PID", "GPUS", "MEMORY", "UTILIZATION"
    ]  # fmt: skip
    assert table[5].split() == [
        "ctl-4242",
        "train",
        "p1",
        "ml",
        "4242",
        "0,1",
        "20480MiB",
        "steady",
        "60",
    ]
    assert table[6].split() == ["job-b", "-", "-", "-", "77", "1", "0MiB", "-"]
    assert table[7].startswith("live layer ")
    assert run(live_file, "status", "--json", "-i", "0") == ctl.EXIT_OK
    (only,) = json.loads(capsys.readouterr().out)["allocations"]  # job-b holds GPU 1 only
    assert {k: v for k, v in only.items() if k != "start_time_ms"} == {
        "id": "ctl-4242",
        "container": "train",
        "pod": "p1",
        "namespace": "ml",
        "pid": 4242,
        "gpus": [0, 1],
        "gpu_uuids": [
            "GPU-01000100-1111-2222-3333-000000000000",
            "GPU-01000100-1111-2222-3333-000000000001",
        ],
        "mig": [],
        "memory_bytes": 20 * GiB,
        "utilization": "steady 60",
    }
    assert abs(only["start_time_ms"] / 1000 - datetime.now(UTC).timestamp()) < 3600

    assert run(live_file, "release", "ctl-4242", "job") == ctl.EXIT_OK  # a prefix naming one
    assert capsys.readouterr().out.splitlines() == [
        "released ctl-4242 (pid 4242)",
        "released job-b (pid 77)",
    ]
    for handle in (gpu0, gpu1):
        assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle) == []
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert info.used == board
    assert run(live_file, "status") == ctl.EXIT_OK
    assert "allocations" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["alloc", "--pid", "x", "--gpus", "0"], "pid='x'"),
        (["alloc", "--pid", "0", "--gpus", "0"], "pid='0'"),
        (["alloc", "--pid", "1", "--gpus", "7"], "gpu='7'"),
        (["alloc", "--pid", "1", "--gpus", "0", "--memory", "3Q"], "memory='3Q'"),
        (["alloc", "--pid", "1", "--gpus", "0", "--utilization", "zz"], "utilization='zz'"),
        (["alloc", "--pid", "1", "--gpus", "0", "--id", "x" * 72], "container_id="),
        (["release", "nobody"], "id='nobody'"),
        (["release", "ctl-1", "nobody"], "id='nobody'"),  # none is removed
    ],
)
def test_a_bad_allocation_is_refused_naming_it_and_nothing_is_written(
    live_file: Path, argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(live_file, "alloc", "--pid", "1", "--gpus", "1") == ctl.EXIT_OK
    before = generation(live_file)
    capsys.readouterr()
    assert run(live_file, *argv) == ctl.EXIT_VALUE
    assert named in capsys.readouterr().err
    assert generation(live_file) == before
    with live.LiveLayer.open(live_file) as layer:
        assert [a.container_id for a in layer.list()] == ["ctl-1"]


def test_status_lists_a_damaged_record_without_failing(
    live_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record whose GPU mask names GPUs the board lacks (a hand-edited or damaged file) and
    whose strings fill their fields without a NUL is listed, not a crash."""
    from nvml_mock_live import _layout as layout

    assert run(live_file, "alloc", "--pid", "9", "--gpus", "0") == ctl.EXIT_OK
    with live_file.open("r+b") as raw:
        _, mask_at, _ = layout.LIVE_PROCESS_FIELDS["gpu_mask"]
        raw.seek(layout.LIVE_PROCESSES_OFFSET + mask_at)
        raw.write(((1 << 0) | (1 << 40)).to_bytes(8, "little"))
        _, pod_at, pod_size = layout.LIVE_PROCESS_FIELDS["pod"]
        raw.seek(layout.LIVE_PROCESSES_OFFSET + pod_at)
        raw.write(b"p" * pod_size)
    capsys.readouterr()
    assert run(live_file, "status", "--json") == ctl.EXIT_OK
    (row,) = json.loads(capsys.readouterr().out)["allocations"]
    assert row["gpus"] == [0, 40] and row["gpu_uuids"][1] is None
    assert row["pod"] == "p" * pod_size
    assert run(live_file, "status") == ctl.EXIT_OK
    assert " 0,40 " in capsys.readouterr().out


def test_a_time_past_year_9999_written_by_hand_does_not_break_status(
    live_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--at`` past year 9999 wrote the fault and then tracebacked, and ``status`` kept
    crashing until ``reset``; it is refused now, and a value written another way shows."""
    with live.LiveLayer.open(live_file) as layer:
        layer.set(0, {"temperature_c": 90}, armed=True)
        layer.set(0, {"fault_trigger": 3, "fault_trigger_param": 10**17})
    capsys.readouterr()
    assert run(live_file, "status") == 0
    assert f"at {10**17} ms since the epoch" in capsys.readouterr().out


def test_with_mock_nvml_config_set_the_live_file_is_the_one_beside_it(
    live_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's setup: MOCK_NVML_CONFIG names the state, nothing names the live file.
    The library reads the live file beside the state, and so does nvml-mock-ctl (it used to
    try the overlay's, under /var/lib/nvml-mock, and exit 1)."""
    monkeypatch.delenv(names.ENV_MOCK_NVML_LIVE, raising=False)
    monkeypatch.setenv(names.ENV_OVERLAY_HOST_PATH, str(tmp_path / "no-overlay-here"))
    assert os.environ[names.ENV_MOCK_NVML_CONFIG] == str(live_file.parent / "state.nvmlmock")
    assert ctl.main(["fail", "lost", "-i", "0"]) == ctl.EXIT_OK
    assert values(live_file, 0) == {"gpu_lost": 1}


@pytest.mark.parametrize(
    "argv",
    [
        ["temp", "95"],
        ["power", "500"],
        ["util", "busy"],
        ["clocks", "--sm", "1000"],
        ["throttle", "hw-slowdown"],
        ["pstate", "P8"],
        ["ecc", "--volatile-corrected", "5"],
        ["recovery-action", "gpu-reset"],
    ],
)
def test_value_verbs_take_a_trigger_and_arm_their_values(live_file: Path, argv: list[str]) -> None:
    assert run(live_file, *argv, "-i", "0", "--after-calls", "100") == ctl.EXIT_OK
    with live.LiveLayer.open(live_file, writable=False) as layer:
        armed = layer.armed(0)
        got = layer.values(0)
    assert armed and got["fault_trigger"] == live.vocabulary.TRIGGERS["after-calls"]
    assert got["fault_trigger_param"] == 100
    assert armed <= set(got) - set(live.vocabulary.TRIGGER_KEYS)


def test_a_change_that_clears_keys_cannot_wait_for_a_trigger(live_file: Path) -> None:
    assert run(live_file, "util", "40", "-i", "0", "--at", "0") == ctl.EXIT_USAGE
    assert values(live_file, 0) == {}


def test_an_xid_alone_takes_no_trigger(live_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU has one trigger: an Xid alone would move it for the faults armed there."""
    assert run(live_file, "fail", "thermal", "-i", "0", "--after-calls", "50") == ctl.EXIT_OK
    before = values(live_file, 0)
    capsys.readouterr()
    assert run(live_file, "xid", "79", "-i", "0", "--after-calls", "3") == ctl.EXIT_USAGE
    assert "xid takes no trigger (--after-calls)" in capsys.readouterr().err
    assert run(live_file, "xid", "79", "-i", "0", "--at", "0") == ctl.EXIT_USAGE
    assert values(live_file, 0) == before
    assert [e for e in events(live_file) if e[1] == 0x8] == []  # thermal sends no Xid
