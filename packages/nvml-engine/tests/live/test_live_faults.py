"""Faults written through the live layer, as NVML clients see them: a lost GPU, NVLink links
down, the GPU recovery action.

Through nvidia-ml-py (and ctypes, for calls it does not wrap) bound to the built library, with
the real writer (:mod:`nvml_mock_live.layer`).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15


def _address(handle: Any) -> int:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    assert value is not None
    return value


# --- a lost GPU ---------------------------------------------------------------------------


def _device_functions() -> list[str]:
    """Every function nvml.h declares whose first parameter is a device handle."""
    files = importlib.metadata.files("nvidia-nvml-dev") or []
    header = next(f for f in files if str(f).endswith("include/nvml.h"))
    text = re.sub(r"/\*.*?\*/", "", Path(str(header.locate())).read_text(), flags=re.S)
    found = re.findall(r"nvmlReturn_t\s+DECLDIR\s+(nvml\w+)\s*\(\s*nvmlDevice_t\s+\w+\s*[,)]", text)
    return sorted(set(found))


EVERY_CALL = textwrap.dedent(
    """
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    assert lib.nvmlInit_v2() == 0
    handle = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(handle))
    scratch = ctypes.create_string_buffer(1 << 16)
    answers = {}
    for name in sys.argv[2:]:
        print(name, file=sys.stderr, flush=True)  # the last one named, should one crash
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        answers[name] = fn(handle, scratch, scratch, scratch, scratch, scratch)
    print(json.dumps(answers))
    """
)


def test_a_lost_gpu_answers_gpu_is_lost_on_every_call_on_it(
    pynvml: Any,
    cnvml: ctypes.CDLL,
    library_file: Path,
    live_state: Path,
    layer: live.LiveLayer,
    tmp_path: Path,
) -> None:
    """Every function taking the lost GPU's handle answers GPU_IS_LOST, modelled or a
    NOT_SUPPORTED stub, before it looks at any other argument (a child process calls each
    one with scratch arguments); the other GPU answers as before."""
    names = _device_functions()
    assert len(names) > 250
    layer.set(1, {"gpu_lost": 1})
    script = tmp_path / "every_call.py"
    script.write_text(EVERY_CALL)
    env = dict(os.environ, MOCK_NVML_CONFIG=str(live_state))
    proc = subprocess.run(
        [sys.executable, str(script), str(library_file), *names],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"the child died calling {proc.stderr.split()[-1:]}"
    answers: dict[str, int] = json.loads(proc.stdout)
    assert {n: rc for n, rc in answers.items() if rc != NVML_ERROR_GPU_IS_LOST} == {}

    pynvml.nvmlInit()
    lost = ctypes.c_void_p()
    assert cnvml.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(lost)) == NVML_ERROR_GPU_IS_LOST
    healthy = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert cnvml.nvmlDeviceClearCpuAffinity(healthy) == NVML_ERROR_NOT_SUPPORTED  # a stub
    assert pynvml.nvmlDeviceGetTemperature(healthy, 0) == 31
    assert pynvml.nvmlDeviceGetName(healthy) == "NVIDIA H100 80GB HBM3"
    for call in (
        lambda: pynvml.nvmlDeviceGetName(lost),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(lost, version=pynvml.nvmlMemory_v2),
        lambda: pynvml.nvmlDeviceGetTemperature(lost, 0),
        lambda: pynvml.nvmlDeviceGetFieldValues(lost, [pynvml.NVML_FI_DEV_ECC_CURRENT]),
        lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(healthy, lost),
        lambda: pynvml.nvmlDeviceRegisterEvents(lost, 0x8, pynvml.nvmlEventSetCreate()),
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    layer.clear(1, ["gpu_lost"])
    assert pynvml.nvmlDeviceGetTemperature(lost, 0) == 31


def test_a_lost_gpu_is_counted_and_its_lookups_fill_the_handle_and_answer_lost(
    pynvml: Any, cnvml: ctypes.CDLL, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    want = _address(pynvml.nvmlDeviceGetHandleByIndex(1))
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1))
    serial = pynvml.nvmlDeviceGetSerial(pynvml.nvmlDeviceGetHandleByIndex(1))
    layer.set(1, {"gpu_lost": 1})
    assert pynvml.nvmlDeviceGetCount() == 2
    lookups = {
        "nvmlDeviceGetHandleByIndex_v2": ctypes.c_uint(1),
        "nvmlDeviceGetHandleByIndex": ctypes.c_uint(1),
        "nvmlDeviceGetHandleByUUID": uuid.encode(),
        "nvmlDeviceGetHandleByUUID_lower": uuid.lower().encode(),
        "nvmlDeviceGetHandleBySerial": serial.encode(),
        "nvmlDeviceGetHandleByPciBusId_v2": b"00000000:19:00.0",
        "nvmlDeviceGetHandleByPciBusId": b"0000:19:00.0",
    }
    for name, key in lookups.items():
        handle = ctypes.c_void_p()
        fn = getattr(cnvml, name.removesuffix("_lower"))
        assert (name, fn(key, ctypes.byref(handle))) == (name, NVML_ERROR_GPU_IS_LOST)
        assert (name, handle.value) == (name, want)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(1)
    assert _address(pynvml.nvmlDeviceGetHandleByIndex(0)) != want  # GPU 0 answers


def test_a_lost_gpus_bus_id_stays_readable_for_reports(
    pynvml: Any, cnvml: ctypes.CDLL, layer: live.LiveLayer
) -> None:
    """nvidia-smi names a lost GPU by its bus id ("Unable to determine the device handle for
    GPU 00000000:19:00.0: GPU is lost"); NVML's own PCI calls answer lost, so the mock offers
    the bus id of any handle through nvml_mock_device_bus_id."""
    pynvml.nvmlInit()
    layer.set(1, {"gpu_lost": 1})
    handle = ctypes.c_void_p()
    assert cnvml.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(handle)) == NVML_ERROR_GPU_IS_LOST
    pci = ctypes.create_string_buffer(68)
    assert cnvml.nvmlDeviceGetPciInfo_v3(handle, pci) == NVML_ERROR_GPU_IS_LOST
    bus = ctypes.create_string_buffer(32)
    assert cnvml.nvml_mock_device_bus_id(handle, bus, 32) == NVML_SUCCESS
    assert bus.value == b"00000000:19:00.0"
    assert cnvml.nvml_mock_device_bus_id(handle, bus, 16) == 7  # INSUFFICIENT_SIZE
    assert cnvml.nvml_mock_device_bus_id(ctypes.c_void_p(16), bus, 32) == 2  # INVALID_ARGUMENT
    assert pynvml.nvmlErrorString(NVML_ERROR_GPU_IS_LOST) == "GPU is lost"


def test_a_lost_gpu_armed_after_n_calls_is_lost_from_the_next_call(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    """The fault trigger counts calls on the GPU (per process): armed with "after 3 calls",
    three calls answer and the fourth, and every later one, is lost."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    layer.set(0, {"fault_trigger": 1, "fault_trigger_param": 3})
    layer.set(0, {"gpu_lost": 1}, armed=True)
    assert [pynvml.nvmlDeviceGetTemperature(handle, 0) for _ in range(3)] == [31, 31, 31]
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetTemperature(handle, 0)


# --- NVLink links down -------------------------------------------------------------------


def _fields(pynvml: Any, handle: Any, ids: list[Any]) -> list[Any]:
    out = []
    for value in pynvml.nvmlDeviceGetFieldValues(handle, ids):
        if value.nvmlReturn != NVML_SUCCESS:
            out.append(("error", value.nvmlReturn))
        elif value.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
            out.append(value.value.ullVal)
        else:
            out.append(value.value.uiVal)
    return out


def test_links_down_are_inactive_with_the_live_error_counters(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    n = pynvml
    n.nvmlInit()
    handle = n.nvmlDeviceGetHandleByIndex(0)
    speed = _fields(n, handle, [n.NVML_FI_DEV_NVLINK_SPEED_MBPS_L1])[0]
    assert speed > 0
    layer.set(
        0,
        {
            "nvlink_down_mask": 0b101 | 1 << 40,  # links 0 and 2; bit 40 is past the board's 18
            "nvlink_crc_errors": 7,
            "nvlink_replay_errors": 5,
            "nvlink_recovery_errors": 3,
        },
    )
    states = [n.nvmlDeviceGetNvLinkState(handle, link) for link in range(18)]
    assert states == [0, 1, 0] + [1] * 15
    counters = {
        link: [n.nvmlDeviceGetNvLinkErrorCounter(handle, link, c) for c in range(5)]
        for link in (0, 1, 2)
    }
    # DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA, DL_ECC_DATA
    assert counters == {0: [5, 3, 7, 7, 0], 1: [0, 0, 0, 0, 0], 2: [5, 3, 7, 7, 0]}
    assert _fields(
        n,
        handle,
        [
            n.NVML_FI_DEV_NVLINK_LINK_COUNT,
            n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
            n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L1,
            n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L2,
            n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0,
            n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L2,
            n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6,
            n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
            n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
            n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
            n.NVML_FI_DEV_NVLINK_SPEED_MBPS_L0,
            n.NVML_FI_DEV_NVLINK_SPEED_MBPS_L1,
            (n.NVML_FI_DEV_NVLINK_GET_STATE, 0),
            (n.NVML_FI_DEV_NVLINK_GET_STATE, 1),
            (n.NVML_FI_DEV_NVLINK_GET_SPEED, 2),
            (n.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 2),
            (n.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0),
            (n.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 1),
            (n.NVML_FI_DEV_NVLINK_GET_STATE, 18),
        ],
    ) == [16, 7, 0, 7, 5, 3, 0, 14, 14, 10, 6, 0, speed, 0, 1, 0, 5, 7, 0, ("error", 2)]
    other = n.nvmlDeviceGetHandleByIndex(1)
    assert n.nvmlDeviceGetNvLinkState(other, 0) == 1
    layer.clear(0, ["nvlink_down_mask"])
    assert [n.nvmlDeviceGetNvLinkState(handle, link) for link in range(18)] == [1] * 18
    assert n.nvmlDeviceGetNvLinkErrorCounter(handle, 0, 0) == 0
    assert _fields(
        n, handle, [n.NVML_FI_DEV_NVLINK_LINK_COUNT, n.NVML_FI_DEV_NVLINK_SPEED_MBPS_L0]
    ) == [18, speed]


def test_every_link_down_leaves_no_link_counted(pynvml: Any, layer: live.LiveLayer) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    layer.set(0, {"nvlink_down_mask": (1 << 64) - 1})
    assert _fields(pynvml, handle, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]) == [0]
    assert {pynvml.nvmlDeviceGetNvLinkState(handle, link) for link in range(18)} == {0}


# --- the GPU recovery action -------------------------------------------------------------


def test_the_recovery_action_field_answers_the_live_value(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    field = [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
    assert _fields(pynvml, h1, field) == [pynvml.NVML_GPU_RECOVERY_ACTION_NONE]
    layer.set(1, {"recovery_action": pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT})
    assert _fields(pynvml, h1, field) == [2]
    assert _fields(pynvml, h0, field) == [0]
    layer.set(1, {"recovery_action": 4})
    assert _fields(pynvml, h1, field) == [4]
    layer.clear(1)
    assert _fields(pynvml, h1, field) == [0]
