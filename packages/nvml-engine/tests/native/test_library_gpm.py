"""GPM: samples and metrics on Hopper and later boards, through nvidia-ml-py's GPM helpers.

The samples are taken with ``MOCK_NVML_NOW_MS`` pinned at two instants a second apart (the
library reads the pin at ``nvmlInit``, so NVML is initialised again between the samples),
so every rate and ratio below is exact. The values must agree with what the rest of the
library reports for the same pattern: utilization rates, PCIe throughput and the NVLink
throughput counters.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import race_frees
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from nvml_mock_live import Allocation

EPOCH = 1_700_000_000_000
STEADY = 1
MIB = 1 << 20


def stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str, count: int = 2) -> Path:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="gpm-node", profile=profile, count=count)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    return state


@pytest.fixture
def h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[live.LiveLayer]:
    state = stage(tmp_path, monkeypatch, "h100")
    with live.LiveLayer.open(state.parent / live.LIVE_FILE_NAME) as layer:
        yield layer


def steady(level: int) -> dict[str, int]:
    return {
        "util_pattern": STEADY,
        "util_pattern_level": level,
        "util_pattern_epoch_ms": EPOCH,
    }


Take = Callable[[int], Any]


def at(pynvml: Any, monkeypatch: pytest.MonkeyPatch, ms: int) -> None:
    """(Re)initialise NVML with the clock pinned at EPOCH + ms."""
    while pynvml._nvmlLib_refcount:
        pynvml.nvmlShutdown()
    monkeypatch.setenv("MOCK_NVML_NOW_MS", str(EPOCH + ms))
    pynvml.nvmlInit()


def metrics(pynvml: Any, first: Any, second: Any, ids: Sequence[int]) -> dict[int, Any]:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(ids)
    request.sample1 = first
    request.sample2 = second
    for i, metric_id in enumerate(ids):
        request.metrics[i].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(request)
    return {request.metrics[i].metricId: request.metrics[i] for i in range(len(ids))}


def two_samples(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, gpu: int = 0, *, apart_ms: int = 1000
) -> tuple[Any, Any]:
    at(pynvml, monkeypatch, 60_000)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(gpu), first)
    at(pynvml, monkeypatch, 60_000 + apart_ms)
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(gpu), second)
    return first, second


def test_hopper_supports_gpm_and_ampere_does_not(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage(tmp_path, monkeypatch, "h100")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 1
    assert pynvml.nvmlGpmQueryIfStreamingEnabled(handle) == 0
    pynvml.nvmlGpmSetStreamingEnabled(handle, 1)
    assert pynvml.nvmlGpmQueryIfStreamingEnabled(handle) == 1
    pynvml.nvmlGpmSetStreamingEnabled(handle, 0)
    pynvml.nvmlShutdown()

    ampere = tmp_path / "ampere"
    ampere.mkdir()
    stage(ampere, monkeypatch, "a100")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 0
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(handle, sample)
    pynvml.nvmlGpmSampleFree(sample)


def test_the_support_query_checks_its_version(pynvml: Any, h100: live.LiveLayer) -> None:
    pynvml.nvmlInit()
    support = pynvml.c_nvmlGpmSupport_t()
    support.version = 2
    fn = pynvml._nvmlGetFunctionPointer("nvmlGpmQueryDeviceSupport")
    rc = fn(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(support))
    assert rc == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_ratios_follow_the_utilization_pattern(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    h100.set(0, steady(60))
    first, second = two_samples(pynvml, monkeypatch)
    got = metrics(
        pynvml,
        first,
        second,
        [
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            pynvml.NVML_GPM_METRIC_FP16_UTIL,
        ],
    )
    util = pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert {m.nvmlReturn for m in got.values()} == {pynvml.NVML_SUCCESS}
    assert got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL].value == pytest.approx(util.gpu)
    assert got[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL].value == pytest.approx(util.memory)
    sm = got[pynvml.NVML_GPM_METRIC_SM_UTIL].value
    tensor = got[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL].value
    assert 0 < tensor < sm < util.gpu
    assert got[pynvml.NVML_GPM_METRIC_SM_UTIL].metricInfo.unit == b"%"
    for sample in (first, second):
        pynvml.nvmlGpmSampleFree(sample)


def test_an_idle_gpu_reports_zero_activity(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_samples(pynvml, monkeypatch, gpu=1)
    got = metrics(
        pynvml,
        first,
        second,
        [pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC],
    )
    assert [m.value for m in got.values()] == [0.0, 0.0]


def test_rates_are_the_byte_counters_over_the_interval(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    h100.set(0, steady(80))
    fields = [
        pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
    ]
    at(pynvml, monkeypatch, 0)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    counters = []
    for sample, ms in ((first, 60_000), (second, 62_000)):
        at(pynvml, monkeypatch, ms)
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlGpmSampleGet(handle, sample)
        values = pynvml.nvmlDeviceGetFieldValues(handle, fields)
        counters.append([v.value.ullVal for v in values])
    got = metrics(
        pynvml,
        first,
        second,
        [
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
            pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
            pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC,
        ],
    )
    pcie_bytes = counters[1][0] - counters[0][0]
    nvlink_kib = counters[1][1] - counters[0][1]
    assert pcie_bytes > 0 and nvlink_kib > 0
    assert got[pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC].value == pytest.approx(pcie_bytes / MIB / 2)
    total = got[pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC].value
    assert total == pytest.approx(nvlink_kib * 1024 / MIB / 2)
    links = pynvml.nvmlDeviceGetFieldValues(
        pynvml.nvmlDeviceGetHandleByIndex(0), [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]
    )[0].value.uiVal
    assert got[pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC].value == pytest.approx(total / links)


def test_an_allocation_raises_sm_activity(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    h100.put(
        Allocation(
            container_id="pod-a",
            pid=4242,
            gpus=(1,),
            util_pattern=STEADY,
            util_level=70,
            start_time_ms=EPOCH,
        )
    )
    first, second = two_samples(pynvml, monkeypatch, gpu=1)
    got = metrics(pynvml, first, second, [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL])
    assert got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL].value == pytest.approx(70)


def test_bad_requests_are_refused(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_samples(pynvml, monkeypatch)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # the later sample first
        metrics(pynvml, second, first, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    other = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(1), other)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # samples of two GPUs
        metrics(pynvml, first, other, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    got = metrics(pynvml, first, second, [9999 % pynvml.NVML_GPM_METRIC_MAX])
    assert next(iter(got.values())).nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = 7
    request.sample1, request.sample2 = first, second
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(request)


def test_a_lost_gpu_is_lost_for_gpm(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_samples(pynvml, monkeypatch)
    h100.set(0, {"gpu_lost": 1})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        metrics(pynvml, first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), first)


def test_mig_samples_follow_the_processes_on_their_instance(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    at(pynvml, monkeypatch, 0)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
    )
    gis = [pynvml.nvmlDeviceCreateGpuInstance(handle, info.id) for _ in range(2)]
    ids = [pynvml.nvmlGpuInstanceGetInfo(gi).id for gi in gis]
    h100.put(
        Allocation(
            container_id="pod-mig",
            pid=4343,
            gpus=(0,),
            mig=((0, ids[0], 0),),
            util_pattern=STEADY,
            util_level=55,
            start_time_ms=EPOCH,
        )
    )
    values = []
    for gi_id in ids:
        at(pynvml, monkeypatch, 60_000)
        first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmMigSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), gi_id, first)
        at(pynvml, monkeypatch, 61_000)
        pynvml.nvmlGpmMigSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), gi_id, second)
        got = metrics(pynvml, first, second, [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL])
        values.append(got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL].value)
    assert values == [pytest.approx(55), 0.0]
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), 13, sample)


def test_a_freed_sample_names_nothing(
    pynvml: Any, h100: live.LiveLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A freed sample is refused wherever it is passed (a second free, a sample, a metric
    between it and a live one) with INVALID_ARGUMENT, not read after the free; the samples
    still held answer as before."""
    h100.set(0, steady(40))
    first, second = two_samples(pynvml, monkeypatch)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlGpmSampleFree(first)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(first)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleGet(handle, first)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics(pynvml, first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    third = pynvml.nvmlGpmSampleAlloc()
    at(pynvml, monkeypatch, 62_000)
    pynvml.nvmlGpmSampleGet(handle, third)
    got = metrics(pynvml, second, third, [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL])
    assert got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL].value == pytest.approx(40)
    for sample in (second, third):
        pynvml.nvmlGpmSampleFree(sample)


def test_samples_taken_while_they_are_freed(pynvml: Any, h100: live.LiveLayer) -> None:
    """Threads sample in a loop, each into a sample of its own (a sample is the caller's
    buffer), while the samples are freed: each call answers SUCCESS (it took its sample
    first) or INVALID_ARGUMENT (after), and the frees return."""
    pynvml.nvmlInit()
    lib = pynvml._nvmlGetFunctionPointer
    get, alloc, free = (
        lib("nvmlGpmSampleGet"),
        lib("nvmlGpmSampleAlloc"),
        lib("nvmlGpmSampleFree"),
    )
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for _ in range(20):
        samples = [ctypes.c_void_p() for _ in range(4)]
        for sample in samples:
            assert alloc(ctypes.byref(sample)) == 0
        answers = race_frees(
            [partial(get, handle, sample) for sample in samples],
            [partial(free, sample) for sample in samples],
            settle=0.002,
        )
        for mine in answers:
            assert set(mine[:-1]) <= {pynvml.NVML_SUCCESS}
            assert mine[-1] == pynvml.NVML_ERROR_INVALID_ARGUMENT
