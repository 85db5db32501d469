"""Moving telemetry: utilization patterns and what follows load, through nvidia-ml-py.

Patterns are written with the real writer (:mod:`nvml_mock_live.layer`) and read through
unmodified nvidia-ml-py bound to the built library. ``MOCK_NVML_NOW_MS`` pins the clock
the library reads at ``nvmlInit`` (a test-only switch), so each sample is taken at an
exact instant: no test depends on timing, and two processes pinned to the same instant
must agree to the last digit.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_live.vocabulary import UTIL_PATTERNS

EPOCH = 1_700_000_000_000  # ms, CLOCK_REALTIME: when the patterns below start
IDLE_MW = 71234  # the fixture board's idle power ...
LIMIT_MW = 700000  # ... and its limit
IDLE_C = 31  # idle temperature; temp_gpu_max_c is 87
IDLE_MHZ = 345
MAX_MHZ = 1980
LAG_MS = 20000  # the default temperature lag
STEADY, BUSY, BURST, SINE = (UTIL_PATTERNS[n] for n in ("steady", "busy", "burst", "sine"))

Sample = dict[str, int]
Sampler = Callable[..., Sample]


def read_sample(pynvml: Any, handle: Any) -> Sample:
    """Every value a pattern moves, read through nvidia-ml-py."""
    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    fields = pynvml.nvmlDeviceGetFieldValues(
        handle,
        [
            (pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_POWER_SCOPE_GPU),
            (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_POWER_SCOPE_GPU),
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
        ],
    )
    assert [f.nvmlReturn for f in fields] == [0] * len(fields)
    return {
        "util": util.gpu,
        "mem_util": util.memory,
        "power": pynvml.nvmlDeviceGetPowerUsage(handle),
        "power_average": fields[0].value.uiVal,
        "power_instant": fields[1].value.uiVal,
        "temperature": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "memory_temperature": fields[2].value.uiVal,
        "sm_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "graphics_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_GRAPHICS),
        "pstate": pynvml.nvmlDeviceGetPerformanceState(handle),
        "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "energy": pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        "energy_field": fields[3].value.ullVal,
        "pcie_tx": pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx": pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES),
        "pcie_tx_bytes": fields[4].value.ullVal,
        "pcie_rx_bytes": fields[5].value.ullVal,
        "nvlink_tx_kib": fields[6].value.ullVal,
        "nvlink_raw_rx_kib": fields[7].value.ullVal,
    }


@pytest.fixture
def live_path(write_state: StateWriter) -> Path:
    state = write_state(pstate=8, clocks_event_reasons=1)
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


@pytest.fixture
def layer(live_path: Path) -> Iterator[Any]:
    with live.LiveLayer.open(live_path) as opened:
        yield opened


@pytest.fixture
def sample(pynvml: Any, monkeypatch: pytest.MonkeyPatch) -> Sampler:
    """Read GPU ``gpu`` with the clock pinned at ``EPOCH + at`` ms (one init cycle each)."""

    def read(at: int, gpu: int = 0) -> Sample:
        monkeypatch.setenv("MOCK_NVML_NOW_MS", str(EPOCH + at))
        pynvml.nvmlInit()
        try:
            return read_sample(pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu))
        finally:
            pynvml.nvmlShutdown()

    return read


def pattern(
    kind: int, level: int = 0, period_ms: int = 0, seed: int = 0, **extra: int
) -> dict[str, int]:
    keys = {
        "util_pattern": kind,
        "util_pattern_epoch_ms": EPOCH,
        "util_pattern_seed": seed,
        **extra,
    }
    if level:
        keys["util_pattern_level"] = level
    if period_ms:
        keys["util_pattern_period_ms"] = period_ms
    return keys


BOARD: Sample = {
    "util": 0,
    "mem_util": 0,
    "power": IDLE_MW,
    "power_average": IDLE_MW,
    "power_instant": IDLE_MW,
    "temperature": IDLE_C,
    "memory_temperature": 38,
    "sm_clock": IDLE_MHZ,
    "graphics_clock": IDLE_MHZ,
    "pstate": 8,
    "reasons": 1,
    "energy": 0,
    "energy_field": 0,
    "pcie_tx": 0,
    "pcie_rx": 0,
    "pcie_tx_bytes": 0,
    "pcie_rx_bytes": 0,
    "nvlink_tx_kib": 0,
    "nvlink_raw_rx_kib": 0,
}


def test_without_a_pattern_the_board_answers_and_a_pattern_moves_only_its_gpu(
    layer: Any, sample: Sampler
) -> None:
    assert sample(60000, gpu=1) == BOARD
    layer.set(1, pattern(STEADY, 60))
    assert sample(60000, gpu=0) == BOARD
    moved = sample(60000, gpu=1)
    assert moved["util"] == 60 and moved["power"] > IDLE_MW
    layer.set(1, {"util_pattern": 0})  # a pattern key set to "none" is the board too
    assert sample(60000, gpu=1) == BOARD
    layer.set(1, pattern(BUSY))
    assert sample(-100, gpu=1) == BOARD  # before the pattern's epoch
    layer.clear(1)
    assert sample(60000, gpu=1) == BOARD


def test_a_pattern_not_running_leaves_a_busy_board_as_it_is(
    write_state: StateWriter, sample: Sampler
) -> None:
    """A board that idles at some load (util 30 %) keeps its clocks and readings while the
    pattern key says none, or before the pattern's epoch: only a running pattern moves them."""
    state = write_state(util_gpu_pct=30, util_mem_pct=12, power_average_mw=80000)
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    board = sample(0)
    assert (board["util"], board["sm_clock"], board["power_average"]) == (30, IDLE_MHZ, 80000)
    with live.LiveLayer.open(path) as writer:
        writer.set(0, {"util_pattern": 0})
        assert sample(0) == board
        writer.set(0, pattern(SINE))
        assert sample(-1000) == board


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        # steady N: N at every instant
        (pattern(STEADY, 37), {0: 37, 2500: 37, 59900: 37, 3_600_000: 37}),
        # burst: the peak for the first 20 % of each period (10 s by default), idle between
        (pattern(BURST, 80), {0: 80, 1900: 80, 2000: 0, 9900: 0, 10000: 80, 12100: 0}),
        (pattern(BURST, period_ms=1000), {0: 100, 199: 100, 200: 0, 999: 0, 1000: 100}),
        # sine: from idle up to the peak and back over the period (60 s by default)
        (pattern(SINE), {0: 0, 15000: 50, 30000: 100, 45000: 50, 60000: 0}),
        (pattern(SINE, 60, period_ms=4000), {0: 0, 1000: 30, 2000: 60, 3000: 30}),
    ],
    ids=["steady", "burst", "burst-1s", "sine", "sine-4s"],
)
def test_each_pattern_gives_its_documented_utilization(
    layer: Any, sample: Sampler, keys: dict[str, int], expected: Mapping[int, int]
) -> None:
    layer.set(0, keys)
    for at, util in expected.items():
        got = sample(at)
        assert (at, got["util"]) == (at, util)
        assert got["mem_util"] == round(util * 0.4 + 1e-9)


def test_busy_stays_between_90_and_100_with_seeded_noise(layer: Any, sample: Sampler) -> None:
    layer.set(0, pattern(BUSY, seed=7))
    layer.set(1, pattern(BUSY, seed=7))
    first = [sample(at)["util"] for at in range(0, 3000, 100)]
    assert all(90 <= u <= 100 for u in first)
    assert len(set(first)) > 3  # it moves from quantum to quantum
    assert [
        sample(at)["util"] for at in range(0, 3000, 100)
    ] == first  # and is a function of the instant
    assert [sample(at, gpu=1)["util"] for at in range(0, 3000, 100)] != first  # per GPU
    layer.set(0, {"util_pattern_seed": 8})
    assert [sample(at)["util"] for at in range(0, 3000, 100)] != first  # and per seed


def test_a_sample_holds_for_its_100_ms_quantum(layer: Any, sample: Sampler) -> None:
    layer.set(0, pattern(BUSY, seed=3))
    for start in (0, 700, 1500):
        assert sample(start) == sample(start + 99)


READER = textwrap.dedent(
    """
    import ctypes, json, os, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # this test, and conftest
    import pynvml
    from test_live_telemetry import read_sample
    pynvml.nvmlInit()
    print(json.dumps([read_sample(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in (0, 1)]))
    """
)


def _read_in_child(script: Path, library: Path, state: Path, now_ms: int | None) -> list[Sample]:
    env = dict(os.environ, MOCK_NVML_CONFIG=str(state))
    env.pop("MOCK_NVML_NOW_MS", None)
    if now_ms is not None:
        env["MOCK_NVML_NOW_MS"] = str(now_ms)
    proc = subprocess.run(
        [sys.executable, str(script), str(library), str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    samples: list[Sample] = json.loads(proc.stdout)
    return samples


def test_two_processes_reading_the_same_instant_agree(
    library_file: Path, live_path: Path, layer: Any, tmp_path: Path
) -> None:
    script = tmp_path / "reader.py"
    script.write_text(READER)
    state = live_path.parent / "state.nvmlmock"
    layer.set(0, pattern(BUSY, seed=11))
    layer.set(1, pattern(SINE, 90, period_ms=7000, seed=5))
    for at in (1234, 45_678, 3_600_000):
        first = _read_in_child(script, library_file, state, EPOCH + at)
        second = _read_in_child(script, library_file, state, EPOCH + at)
        assert first == second
        assert first[0]["util"] >= 90 and first[1]["util"] > 0
    # the real clock: no pinned instant, a time-independent pattern reads the same
    layer.set(0, pattern(STEADY, 42, util_pattern_epoch_ms=1))
    unpinned = _read_in_child(script, library_file, state, None)
    assert unpinned[0]["util"] == 42 and unpinned[0]["energy"] > 0


def test_power_temperature_clock_and_pstate_rise_with_load(layer: Any, sample: Sampler) -> None:
    settled = 10 * LAG_MS  # long after the epoch: temperature has followed the power
    rows = []
    for level in (0, 10, 25, 50, 75, 100):
        layer.set(0, pattern(STEADY, level) if level else pattern(STEADY, util_pattern_level=0))
        rows.append(sample(settled))
    idle, *loaded = rows
    assert (idle["power"], idle["temperature"], idle["sm_clock"], idle["pstate"]) == (
        IDLE_MW,
        IDLE_C,
        IDLE_MHZ,
        8,
    )
    for key in (
        "power",
        "power_average",
        "temperature",
        "memory_temperature",
        "sm_clock",
        "graphics_clock",
    ):
        values = [row[key] for row in rows]
        assert values == sorted(values), key
        assert values[-1] > values[0], key
    assert [row["pstate"] for row in loaded] == [0] * len(loaded)  # P0 under load
    assert [row["reasons"] for row in rows] == [1] + [0] * len(loaded)  # no longer GPU-idle
    top = rows[-1]
    assert top["power"] == top["power_instant"] == top["power_average"] == LIMIT_MW
    assert top["temperature"] == 65  # 60 % of the way from idle to temp_gpu_max_c (87)
    assert top["sm_clock"] == MAX_MHZ
    assert rows[2]["sm_clock"] == MAX_MHZ  # full boost from 20 % load
    assert IDLE_MHZ < rows[1]["sm_clock"] < MAX_MHZ
    assert (MAX_MHZ - rows[1]["sm_clock"]) % 15 == 0  # on the board's supported-clock grid
    assert rows[3]["power"] == IDLE_MW + (LIMIT_MW - IDLE_MW) // 2


def test_temperature_follows_power_with_a_lag(layer: Any, sample: Sampler) -> None:
    layer.set(0, pattern(STEADY, 100))
    start = sample(0)
    assert (
        start["power"] == LIMIT_MW and start["temperature"] == IDLE_C
    )  # power at once, heat later
    curve = [sample(at)["temperature"] for at in range(0, 6 * LAG_MS, LAG_MS // 4)]
    assert curve == sorted(curve) and curve[-1] == 65
    one_lag = sample(LAG_MS)["temperature"]
    assert one_lag == round(
        IDLE_C + (65 - IDLE_C) * (1 - 2.718281828**-1)
    )  # first order: 63 % at tau
    layer.set(0, {"temperature_lag_ms": 2000})
    assert sample(LAG_MS)["temperature"] == 65  # a shorter lag settles sooner
    # a sine's temperature peaks after its utilization does
    layer.set(0, pattern(SINE, period_ms=60000, temperature_lag_ms=5000))
    cycle = {at: sample(10 * 60000 + at) for at in range(0, 60000, 1000)}
    hottest = max(cycle, key=lambda at: (cycle[at]["temperature"], -at))
    assert 30000 < hottest < 45000
    assert cycle[30000]["util"] == 100


@pytest.mark.parametrize(
    "keys",
    [
        pattern(STEADY, 50),
        pattern(BUSY, seed=2),
        pattern(BURST, 90, period_ms=3000),
        pattern(SINE, 80, period_ms=5000),
    ],
    ids=["steady", "busy", "burst", "sine"],
)
def test_energy_is_the_integral_of_power_and_never_goes_back(
    layer: Any, sample: Sampler, keys: dict[str, int]
) -> None:
    layer.set(0, keys)
    samples = [sample(at) for at in range(0, 15000, 100)]
    energies = [s["energy"] for s in samples]
    assert energies[0] == 0
    assert all(a <= b for a, b in itertools.pairwise(energies))
    assert [s["energy_field"] for s in samples] == energies
    # the sum of power x 100 ms over the samples (mJ); busy's noise averages out to its mean
    integral = sum(s["power"] for s in samples[:-1]) * 100 / 1000
    assert energies[-1] == pytest.approx(integral, rel=0.01)


def test_energy_grows_from_its_base_and_a_rebase_keeps_it_going(
    layer: Any, sample: Sampler
) -> None:
    layer.set(0, pattern(STEADY, 100))
    assert sample(10000)["energy"] == LIMIT_MW * 10  # 700 W for 10 s, in mJ
    shown = sample(20000)["energy"]
    # a writer that lowers the limit re-bases energy at what it showed: the counter goes on
    layer.set(
        0,
        {
            "power_limit_mw": 350000,
            "util_pattern_energy_mj": shown,
            "util_pattern_energy_epoch_ms": EPOCH + 20000,
        },
    )
    after = sample(30000)
    assert after["power"] == 350000
    assert after["energy"] == shown + 350000 * 10


def test_explicit_live_values_win_over_the_pattern(layer: Any, sample: Sampler) -> None:
    layer.set(0, pattern(STEADY, 100))
    layer.set(
        0,
        {
            "temperature_c": 80,
            "clock_sm_mhz": 1000,
            "pstate": 2,
            "power_usage_mw": 123456,
            "energy_mj": 42,
            "util_mem_pct": 7,
        },
    )
    got = sample(10 * LAG_MS)
    assert (got["temperature"], got["sm_clock"], got["pstate"], got["power"], got["energy"]) == (
        80,
        1000,
        2,
        123456,
        42,
    )
    assert (got["util"], got["mem_util"]) == (100, 7)
    assert (
        got["graphics_clock"] == MAX_MHZ and got["memory_temperature"] > 38
    )  # the rest still follow


def test_pcie_and_nvlink_traffic_grows_with_load(layer: Any, sample: Sampler) -> None:
    layer.set(0, pattern(STEADY, 50))
    layer.set(1, pattern(STEADY, 100))
    half, full = sample(10000, gpu=0), sample(10000, gpu=1)
    link_kbps = 32000 * 16 // 8 * 1000  # PCIe gen 5 x16 in KB/s
    assert full["pcie_rx"] == link_kbps // 4 and full["pcie_tx"] == link_kbps // 10
    assert half["pcie_rx"] == full["pcie_rx"] // 2
    assert full["pcie_rx_bytes"] == link_kbps // 4 * 1000 * 10  # 10 s at that rate
    later = sample(20000, gpu=1)
    for key in ("pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_kib", "nvlink_raw_rx_kib"):
        assert 0 < half[key] < full[key] < later[key], key
    assert later["nvlink_raw_rx_kib"] > later["nvlink_tx_kib"]  # raw counts the protocol too
    # links that are down carry nothing
    layer.set(1, {"nvlink_down_mask": (1 << 18) - 1})
    assert sample(20000, gpu=1)["nvlink_tx_kib"] == 0


def test_threads_reading_a_moving_gpu_see_coherent_samples(pynvml: Any, layer: Any) -> None:
    """Eight threads read one GPU on the real clock (ctypes releases the GIL in each call):
    every utilization is busy's, every thread's energy only grows, and the power each reads
    is the one its utilization implies."""
    import threading
    import time

    now_ms = int(time.time() * 1000)
    layer.set(0, pattern(BUSY, seed=9, util_pattern_epoch_ms=now_ms - 5000))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    problems: list[str] = []

    def reader() -> None:
        last = 0
        for _ in range(3000):
            util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            power = pynvml.nvmlDeviceGetPowerUsage(handle)
            if (
                not 90 <= util <= 100
                or energy < last
                or not power >= IDLE_MW + (LIMIT_MW - IDLE_MW) * 90 // 100
            ):
                problems.append(f"util {util} energy {energy} after {last} power {power}")
            last = energy

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
