"""Armed events: a fault sent with a trigger delivers its events when the trigger fires, in
each process on its own, as its armed values apply (the reference system's ``failure``
block: ``xid.code`` delivered once when the failure trips, counted per process).

Through nvidia-ml-py bound to the built library, the real writer
(:meth:`nvml_mock_live.LiveLayer.event` with ``armed=True``, and ``nvml-mock-ctl fail``),
and real child processes for the per-process count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from nvml_mock_engine import ctl
from nvml_mock_live.kinds import TRIGGERS

XID = 0x8
ARM = 0x5EED


def _arm(
    layer: live.LiveLayer, gpu: int, *, calls: int | None = None, at_ms: int = 0, tag: int = ARM
) -> None:
    """The GPU's trigger as a writer sets it (``nvml-mock-ctl``'s order): the trigger values
    with the arm's tag, then 95 C armed behind them."""
    trigger = {
        "fault_trigger": TRIGGERS["after-calls"] if calls is not None else TRIGGERS["at"],
        "fault_trigger_param": calls if calls is not None else at_ms,
        "fault_trigger_arm": tag,
    }
    layer.set(gpu, trigger)
    layer.set(gpu, {"temperature_c": 95}, armed=True)


def _xid_set(pynvml: Any, gpu: int = 0) -> Any:
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(gpu), XID, event_set)
    return event_set


@pytest.fixture
def watched(pynvml: Any) -> tuple[Any, Any]:
    """NVML initialised: GPU 0's handle and an Xid set registered on it before any fault."""
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(0), _xid_set(pynvml)


def _read(pynvml: Any, handle: Any, times: int) -> list[int]:
    """*times* calls on the GPU: reads of its (armed) temperature."""
    return [pynvml.nvmlDeviceGetTemperature(handle, 0) for _ in range(times)]


def _pending(pynvml: Any, event_set: Any) -> list[int]:
    """The Xids the set has now, until a wait of 0 ms times out."""
    got = []
    while True:
        try:
            got.append(pynvml.nvmlEventSetWait(event_set, 0).eventData)
        except pynvml.NVMLError_Timeout:
            return got


def test_an_armed_xid_arrives_with_the_armed_values_after_this_process_calls(
    pynvml: Any, layer: live.LiveLayer, watched: tuple[Any, Any]
) -> None:
    handle, event_set = watched
    _arm(layer, 0, calls=2)
    seq = layer.event(0, XID, 48, armed=True)
    assert [(e.seq, e.event_type, e.data, e.arm) for e in layer.events()] == [(seq, XID, 48, ARM)]
    assert _pending(pynvml, event_set) == []  # no call yet: not fired here
    temperatures = _read(pynvml, handle, 2)
    assert _pending(pynvml, event_set) == []
    temperatures += _read(pynvml, handle, 1)  # the third call fires it
    assert temperatures[-1] == 95 and temperatures[:2] != [95, 95]
    assert _pending(pynvml, event_set) == [48]
    assert _pending(pynvml, event_set) == []  # once
    layer.set(0, {"power_limit_mw": 300000})  # a later write re-arms the values, not the Xid
    _read(pynvml, handle, 4)
    assert _pending(pynvml, event_set) == []
    pynvml.nvmlEventSetFree(event_set)


def test_a_set_registered_after_the_armed_event_does_not_receive_it(
    pynvml: Any, layer: live.LiveLayer, watched: tuple[Any, Any]
) -> None:
    handle, early = watched
    _arm(layer, 0, calls=0)
    layer.event(0, XID, 79, armed=True)
    late = _xid_set(pynvml)
    assert pynvml.nvmlDeviceGetTemperature(handle, 0) == 95
    assert (_pending(pynvml, early), _pending(pynvml, late)) == ([79], [])


def test_a_reset_or_another_arm_drops_the_events_still_waiting(
    pynvml: Any, layer: live.LiveLayer, watched: tuple[Any, Any]
) -> None:
    handle, event_set = watched
    _arm(layer, 0, calls=1)
    layer.event(0, XID, 48, armed=True)
    assert _pending(pynvml, event_set) == []  # read, and held for its trigger
    layer.clear(0)  # `nvml-mock-ctl reset`: the arm is gone with the trigger
    _read(pynvml, handle, 1)
    assert _pending(pynvml, event_set) == []
    _arm(layer, 0, calls=0, tag=ARM + 1)
    layer.event(0, XID, 63, armed=True)
    _read(pynvml, handle, 2)
    assert _pending(pynvml, event_set) == [63]


def test_a_set_holds_the_latest_armed_events_up_to_its_bound(
    pynvml: Any, layer: live.LiveLayer, watched: tuple[Any, Any]
) -> None:
    """32 armed events wait per set; past that the oldest go, in ring order otherwise."""
    handle, event_set = watched
    _arm(layer, 0, calls=1)
    for code in range(1, 41):
        layer.event(0, XID, code, armed=True)
    assert _pending(pynvml, event_set) == []
    layer.event(0, XID, 100)  # an event without a trigger goes past the waiting ones
    assert _pending(pynvml, event_set) == [100]
    _read(pynvml, handle, 2)
    assert _pending(pynvml, event_set) == list(range(9, 41))


def test_an_armed_event_at_a_time_wakes_a_blocked_waiter_without_a_call(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    event_set = _xid_set(pynvml, 1)
    due = time.time() + 0.6
    _arm(layer, 1, at_ms=int(due * 1000))
    layer.event(1, XID, 79, armed=True)
    outcome: list[tuple[int, float]] = []

    def wait() -> None:
        data = pynvml.nvmlEventSetWait(event_set, 10000)
        outcome.append((data.eventData, time.time()))

    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(5)  # at the time, within a slice of the wait: not at its 10 s timeout
    early = not waiter.is_alive()
    waiter.join(10)
    assert early and outcome and outcome[0][0] == 79
    assert outcome[0][1] >= due - 0.01  # not before (the trigger's clock is in ms)


def test_an_armed_event_needs_the_gpus_trigger(layer: live.LiveLayer) -> None:
    with pytest.raises(live.LiveValueError, match="GPU 0 has no fault trigger"):
        layer.event(0, XID, 79, armed=True)
    with pytest.raises(live.LiveValueError, match=r"bits 0\.\.31"):
        layer.event(0, 1 << 40, 0)
    assert layer.events() == []


CALLER = textwrap.dedent(
    """
    import ctypes, json, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, 0x8, event_set)
    print("ready", flush=True)
    calls = int(sys.stdin.readline())
    for _ in range(calls):
        pynvml.nvmlDeviceGetTemperature(handle, 0)
    try:
        answer = pynvml.nvmlEventSetWait(event_set, 300).eventData
    except pynvml.NVMLError_Timeout:
        answer = None
    print(json.dumps(answer), flush=True)
    """
)


def test_the_count_is_each_processs_own(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    """Two processes registered before the fault: the one that made the calls gets the Xid,
    the one that made none does not, as each sees the armed values."""
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    env = dict(os.environ, MOCK_NVML_CONFIG=str(live_state))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(library_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.communicate()[1]
        with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as layer:
            _arm(layer, 0, calls=3)
            layer.event(0, XID, 94, armed=True)
        answers = [
            json.loads(proc.communicate(f"{calls}\n", timeout=30)[0].splitlines()[-1])
            for proc, calls in zip(procs, (4, 0), strict=True)
        ]
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    assert answers == [94, None]


def test_a_triggered_fall_off_the_bus_tells_the_health_loop_xid_79_then_the_loss(
    pynvml: Any, live_state: Path, watched: tuple[Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The device plugin's health loop, waiting: `fail fallen-off-bus --after-calls 2` arms
    the loss and its Xid; the third call on the GPU fires both in this process. Each wait is
    one call on the set's GPUs, however many slices it sleeps."""
    live_file = live_state.parent / live.LIVE_FILE_NAME
    handle, event_set = watched
    argv = ["--live-file", str(live_file), "fail", "fallen-off-bus", "-i", "0"]
    assert ctl.main([*argv, "--after-calls", "2"]) == ctl.EXIT_OK
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith("armed (after 2 calls) gpu_lost=1; armed events xid 79")
    )
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 0)  # call 1 on the GPU: a wait is one call
    pynvml.nvmlDeviceGetUUID(handle)  # call 2
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(handle)  # call 3 fires the trigger
    assert pynvml.nvmlEventSetWait(event_set, 1000).eventData == 79
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait(event_set, 1000)


def test_a_long_wait_counts_as_one_call(
    pynvml: Any, layer: live.LiveLayer, watched: tuple[Any, Any]
) -> None:
    """A wait looks at its GPUs every 250 ms slice; only its first look is a call, so a
    health loop's 1.2 s wait does not fire an armed loss of `--after-calls 2`."""
    handle, event_set = watched
    layer.set(0, {"fault_trigger": TRIGGERS["after-calls"], "fault_trigger_param": 2})
    layer.set(0, {"gpu_lost": 1}, armed=True)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 1200)
    pynvml.nvmlDeviceGetUUID(handle)  # call 2
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(handle)
