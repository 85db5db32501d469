"""MIG and events as NVIDIA's own consumers meet them, through nvidia-ml-py on the real library.

Each test is one behaviour a real driver has and the mock lacked, with where the expectation
rests: nvml.h (the header the library is compiled against) or what NVIDIA's components do on
it (mig-parted's reset path, the device plugin's per-MIG-device health check).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import LiveValueError
from nvml_mock_engine.render import render_text
from nvml_mock_live import Allocation, LiveLayer
from smi_fixtures.helpers import smi

XID = 0x8
MIG_CONFIG_CHANGE = 0x100
NO_INSTANCE = 0xFFFFFFFF
NVML_ERROR_IN_USE = 19


@pytest.fixture
def node(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A two-GPU H100 node with a live layer; NVML initialised on it. Returns the live file."""
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="mig-events", profile="h100", count=2)))
    path = tmp_path / live.LIVE_FILE_NAME
    live.create(path, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    pynvml.nvmlInit()
    return path


def one_1g(pynvml: Any, gpu: Any, count: int = 1) -> list[tuple[int, int]]:
    """Create *count* 1g.10gb instances with their default compute instance; their ids."""
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    made = []
    for _ in range(count):
        gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, info.id)
        ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        made.append(
            (
                pynvml.nvmlGpuInstanceGetInfo(gi).id,
                pynvml.nvmlComputeInstanceGetInfo(ci).id,
            )
        )
    return made


# --- item 1: a GPU that lists a process keeps the mode change pending -------------------


def test_set_mig_mode_stays_pending_while_a_process_runs(
    pynvml: Any, node: Path, library_file: Path
) -> None:
    """A real driver leaves the change pending ("In use by another client") while a process
    is on the GPU, until a reset; mig-parted then takes its reset path. A process listed
    through an allocation record counts, with no memory value set on the GPU itself."""
    with LiveLayer.open(node, library=library_file) as records:
        records.put(Allocation("c-busy", pid=os.getpid(), gpus=(0,)))
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)) == 1
    status = pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    assert status == NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [0, 1]
    # the idle GPU beside it switches at once, as before
    other = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceSetMigMode(other, pynvml.NVML_DEVICE_MIG_ENABLE) == 0
    assert pynvml.nvmlDeviceGetMigMode(other) == [1, 1]
    # a reset (nvidia-smi -r, refused while the process runs) makes the pending mode current
    with LiveLayer.open(node, library=library_file) as records:
        records.remove("c-busy")
    assert smi(library_file, "-r", "-i", "0")[0] == 0
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [1, 1]


# --- item 2: a layout change is an nvmlEventMigConfigChange ----------------------------


def test_layout_changes_send_mig_config_change(pynvml: Any, node: Path) -> None:
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    events = pynvml.nvmlEventSetCreate()
    try:
        assert pynvml.nvmlDeviceGetSupportedEventTypes(gpu) & MIG_CONFIG_CHANGE
        pynvml.nvmlDeviceRegisterEvents(gpu, MIG_CONFIG_CHANGE, events)
        ((gi, ci),) = one_1g(pynvml, gpu)  # one GPU instance, one compute instance: two changes
        got = [pynvml.nvmlEventSetWait_v2(events, 1000) for _ in range(2)]
        assert [e.eventType for e in got] == [MIG_CONFIG_CHANGE] * 2
        assert all(e.device.value == gpu.value for e in got) if hasattr(gpu, "value") else True
        # nothing else is pending: the next wait blocks and times out
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 50)
        # the other GPU's set sees nothing of GPU 0's change
        other = pynvml.nvmlDeviceGetHandleByIndex(1)
        second = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(other, MIG_CONFIG_CHANGE, second)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        assert (
            pynvml.nvmlDeviceGetGpuInstanceId(mig),
            pynvml.nvmlDeviceGetComputeInstanceId(mig),
        ) == (gi, ci)
        gi_handle = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi)
        pynvml.nvmlComputeInstanceDestroy(
            pynvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, ci)
        )
        assert pynvml.nvmlEventSetWait_v2(events, 1000).eventType == MIG_CONFIG_CHANGE
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(second, 50)
        pynvml.nvmlEventSetFree(second)
    finally:
        pynvml.nvmlEventSetFree(events)


# --- item 3: a lost GPU ends the wait --------------------------------------------------


def test_wait_reports_a_lost_gpu(pynvml: Any, node: Path) -> None:
    """nvml.h: nvmlEventSetWait_v2 returns NVML_ERROR_GPU_IS_LOST "if a GPU has fallen off
    the bus". The Xid written with it comes first; the loss is reported once per set, so a
    waiter in a loop blocks again afterwards."""
    gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(gpu, XID, events)
    with live.LiveLayer.open(node) as layer:
        layer.event(1, XID, 79)
        layer.set(1, {"gpu_lost": 1})
    try:
        assert pynvml.nvmlEventSetWait_v2(events, 1000).eventData == 79
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlEventSetWait_v2(events, 1000)
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait_v2(events, 50)
    finally:
        pynvml.nvmlEventSetFree(events)


def test_a_waiter_blocked_before_the_loss_wakes_with_it(pynvml: Any, node: Path) -> None:
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(gpu, XID, events)
    seen: list[object] = []

    def wait() -> None:
        try:
            pynvml.nvmlEventSetWait_v2(events, 20000)
        except pynvml.NVMLError as exc:
            seen.append(exc.value)

    waiter = threading.Thread(target=wait)
    waiter.start()
    with live.LiveLayer.open(node) as layer:
        layer.set(0, {"gpu_lost": 1})
        layer.event(1, XID, 31)  # a write wakes waiters; GPU 0's set finds its GPU lost
    waiter.join(30)
    pynvml.nvmlEventSetFree(events)
    assert seen == [pynvml.NVML_ERROR_GPU_IS_LOST]


# --- item 4: an Xid on one MIG device ------------------------------------------------------


def test_an_xid_on_a_mig_device_carries_its_instance_ids(pynvml: Any, node: Path) -> None:
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    (gi_a, _), (gi_b, ci_b) = one_1g(pynvml, gpu, 2)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(gpu, XID, events)
    with live.LiveLayer.open(node) as layer:
        layer.event(0, XID, 48, gpu_instance=gi_b, compute_instance=ci_b)
        layer.event(0, XID, 79)
        xids = [e for e in layer.events() if e.event_type == XID]  # after 4 config changes
        assert [(e.data, e.gpu_instance, e.compute_instance) for e in xids] == [
            (48, gi_b, ci_b),
            (79, None, None),
        ]
        with pytest.raises(LiveValueError, match="not a MIG device of GPU 0"):
            layer.event(0, XID, 48, gpu_instance=9, compute_instance=0)
        with pytest.raises(LiveValueError, match="with the other instance id"):
            layer.event(0, XID, 48, gpu_instance=gi_a)
    try:
        first = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (first.eventData, first.gpuInstanceId, first.computeInstanceId) == (48, gi_b, ci_b)
        second = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (second.gpuInstanceId, second.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    finally:
        pynvml.nvmlEventSetFree(events)


WAIT_IN_VIEW = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import pynvml
pynvml.nvmlInit()
gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
events = pynvml.nvmlEventSetCreate()
pynvml.nvmlDeviceRegisterEvents(gpu, 0x8, events)
print("ready", file=sys.stderr, flush=True)
sys.stdin.readline()
got = []
while True:
    try:
        e = pynvml.nvmlEventSetWait_v2(events, 300)
    except pynvml.NVMLError_Timeout:
        break
    got.append([e.eventData, e.gpuInstanceId, e.computeInstanceId])
print(json.dumps(got))
"""


def test_a_container_given_one_mig_device_gets_only_its_events(
    pynvml: Any, node: Path, library_file: Path
) -> None:
    """nvml.h (nvmlEventSetWait_v2): without the privileges for an instance, "only the events
    which affect all the instances (i.e. whole device) are reported". A container given MIG
    device A gets A's Xids and the whole GPU's, not B's."""
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    made = one_1g(pynvml, gpu, 2)
    mig_a = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    gi_a, ci_a = (
        pynvml.nvmlDeviceGetGpuInstanceId(mig_a),
        pynvml.nvmlDeviceGetComputeInstanceId(mig_a),
    )
    ((gi_b, ci_b),) = [ids for ids in made if ids != (gi_a, ci_a)]
    uuid_a = pynvml.nvmlDeviceGetUUID(mig_a)
    env = dict(os.environ, NVIDIA_VISIBLE_DEVICES=uuid_a)
    child = subprocess.Popen(
        [sys.executable, "-c", WAIT_IN_VIEW, str(library_file)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None and child.stdin is not None
    assert child.stderr.readline().strip() == "ready"
    with live.LiveLayer.open(node) as layer:
        layer.event(0, XID, 43, gpu_instance=gi_b, compute_instance=ci_b)
        layer.event(0, XID, 48, gpu_instance=gi_a, compute_instance=ci_a)
        layer.event(0, XID, 79)
    out, err = child.communicate("go\n", timeout=60)
    assert child.returncode == 0, err
    assert json.loads(out) == [[48, gi_a, ci_a], [79, NO_INSTANCE, NO_INSTANCE]]


def test_ctl_sends_an_xid_to_one_mig_device(pynvml: Any, node: Path, tmp_path: Path) -> None:
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    (_, _), (gi_b, ci_b) = one_1g(pynvml, gpu, 2)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(gpu, XID, events)
    ctl = [sys.executable, "-m", "nvml_mock_engine.ctl", "--live-file", str(node)]
    done = subprocess.run(
        [*ctl, "xid", "48", "-i", "0", "--gi", str(gi_b), "--ci", str(ci_b)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"xid 48 on GI {gi_b} CI {ci_b}" in done.stdout
    got = pynvml.nvmlEventSetWait_v2(events, 1000)
    pynvml.nvmlEventSetFree(events)
    assert (got.eventData, got.gpuInstanceId, got.computeInstanceId) == (48, gi_b, ci_b)
    # a MIG device GPU 0 does not have is refused, nothing sent; half a device is a usage error
    bad = subprocess.run(
        [*ctl, "xid", "48", "-i", "0", "--gi", "5", "--ci", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        bad.returncode == 3 and "--gi/--ci='5/0'" in bad.stderr and "not a MIG device" in bad.stderr
    )
    half = subprocess.run(
        [*ctl, "xid", "48", "-i", "0", "--gi", "5"], capture_output=True, text=True, check=False
    )
    assert half.returncode == 2 and "give both or neither" in half.stderr


def mig_devices_as_the_dra_driver_reads_them(pynvml: Any) -> dict[tuple[str, int, int], str]:
    """(parent UUID, GI id, CI id) -> MIG UUID, read as NVIDIA's DRA driver builds its health
    map: each GPU's MIG handles by index, the ids from the handle, then ``GetInfo`` of the
    GPU and compute instance those ids name; the parent from the MIG handle itself."""
    found: dict[tuple[str, int, int], str] = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
            except pynvml.NVMLError_NotFound:
                continue
            gi = pynvml.nvmlDeviceGetGpuInstanceById(gpu, pynvml.nvmlDeviceGetGpuInstanceId(mig))
            ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(
                gi, pynvml.nvmlDeviceGetComputeInstanceId(mig)
            )
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            key = (
                pynvml.nvmlDeviceGetUUID(parent),
                pynvml.nvmlGpuInstanceGetInfo(gi).id,
                pynvml.nvmlComputeInstanceGetInfo(ci).id,
            )
            found[key] = pynvml.nvmlDeviceGetUUID(mig)
    return found


def test_an_xid_event_names_exactly_one_mig_device_of_the_node(pynvml: Any, node: Path) -> None:
    """NVIDIA's DRA driver (NVMLDeviceHealthCheck) registers one event set on every parent GPU
    and taints the device its map holds at (the event device's UUID, gpuInstanceId,
    computeInstanceId). On two GPUs with the same layout, hence the same instance ids, each
    Xid sent to one MIG device must come back naming that device and no other: the event's
    device is its own GPU, and its ids are those the instance's GetInfo answers."""
    for index in (0, 1):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
        one_1g(pynvml, gpu, 2)
        half = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
            gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE
        )
        gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, half.id)
        ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, 0
        )
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    devices = mig_devices_as_the_dra_driver_reads_them(pynvml)
    assert len(devices) == 6 and len(set(devices.values())) == 6
    parents = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in (0, 1)]
    events = pynvml.nvmlEventSetCreate()
    for index in (0, 1):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceRegisterEvents(
            gpu, XID & pynvml.nvmlDeviceGetSupportedEventTypes(gpu), events
        )
    try:
        for parent, gi_id, ci_id in sorted(devices):
            with live.LiveLayer.open(node) as layer:
                layer.event(
                    parents.index(parent), XID, 48, gpu_instance=gi_id, compute_instance=ci_id
                )
            got = pynvml.nvmlEventSetWait_v2(events, 1000)
            named = (pynvml.nvmlDeviceGetUUID(got.device), got.gpuInstanceId, got.computeInstanceId)
            assert named == (parent, gi_id, ci_id)
            assert devices[named] == devices[(parent, gi_id, ci_id)]
        # a whole-GPU Xid names no MIG device: the ids are NO_INSTANCE on the right parent
        with live.LiveLayer.open(node) as layer:
            layer.event(1, XID, 79)
        got = pynvml.nvmlEventSetWait_v2(events, 1000)
        named = (pynvml.nvmlDeviceGetUUID(got.device), got.gpuInstanceId, got.computeInstanceId)
        assert named == (parents[1], NO_INSTANCE, NO_INSTANCE) and named not in devices
    finally:
        pynvml.nvmlEventSetFree(events)


# --- item 6: the profile table of a MIG-capable GPU with MIG off ----------------------------


def test_profile_table_answers_with_mig_disabled(pynvml: Any, node: Path) -> None:
    """nvml.h: nvmlDeviceGetGpuInstanceProfileInfo and ...PossiblePlacements_v2 answer
    NOT_SUPPORTED only "if device doesn't support MIG"; the versioned ProfileInfoV and
    RemainingCapacity also "if device doesn't have MIG mode enabled". The DRA driver's
    DynamicMIG reads the plain two on a GPU with MIG off."""
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [0, 0]
    # version=1: the plain nvmlDeviceGetGpuInstanceProfileInfo, which go-nvml calls
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, version=1
    )
    assert (info.id, info.instanceCount, info.multiprocessorCount) == (19, 7, 16)
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(gpu, info.id, None, ctypes.byref(count))
    assert count.value == 7
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the versioned call (version=2)
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, info.id)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(gpu, info.id)


# --- item 7: a 1c.3g and a 2c.3g in one 3g instance ----------------------------------------


def test_cci_makes_a_1c_and_a_2c_in_one_3g(pynvml: Any, node: Path, library_file: Path) -> None:
    """`mig -cci 0,1 -gi 2` in a 3g.40gb: a real driver creates both (the 1c takes the slice
    the 2c cannot use)."""
    assert smi(library_file, "-i", "0", "-mig", "1")[0] == 0
    assert smi(library_file, "mig", "-i", "0", "-cgi", "9")[0] == 0
    rc, out = smi(library_file, "mig", "-i", "0", "-cci", "0,1", "-gi", "2")
    assert rc == 0, out
    assert out.count("Successfully created compute instance") == 2
    rc, out = smi(library_file, "mig", "-i", "0", "-lci")
    assert rc == 0
    assert "MIG 1c.3g.40gb" in out and "MIG 2c.3g.40gb" in out
    assert "2:1" in out and "0:2" in out


# --- item 18: processes never hold more memory than the GPU has ------------------------------


def test_process_memory_fits_the_gpu(pynvml: Any, node: Path, library_file: Path) -> None:
    """Allocations past a GPU's memory fail on a real driver, so no process list shows more
    than fits: records are served in the order written, a later one gets what is left, and
    the processes' sum is exactly the GPU's used memory beyond its own."""
    gib = 1 << 30
    gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
    before = pynvml.nvmlDeviceGetMemoryInfo(gpu, version=pynvml.nvmlMemory_v2)
    room = before.total - before.reserved - before.used
    with LiveLayer.open(node, library=library_file) as records:
        records.put(Allocation("c-a", pid=101, gpus=(1,), used_memory_bytes=room // 2))
        records.put(Allocation("c-b", pid=102, gpus=(1,), used_memory_bytes=room // 2 + 5 * gib))
        records.put(Allocation("c-c", pid=103, gpus=(1,), used_memory_bytes=20 * gib))
    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)}
    assert procs == {101: room // 2, 102: room - room // 2, 103: 0}
    after = pynvml.nvmlDeviceGetMemoryInfo(gpu, version=pynvml.nvmlMemory_v2)
    assert after.used == before.used + sum(procs.values())
    assert after.free == 0
    # the first record gone, the later ones get their memory in order
    with LiveLayer.open(node, library=library_file) as records:
        records.remove("c-a")
    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)}
    assert procs == {102: room // 2 + 5 * gib, 103: min(20 * gib, room - (room // 2 + 5 * gib))}
    rc, out = smi(
        library_file,
        "-i",
        "1",
        "--query-compute-apps=pid,used_memory",
        "--format=csv,noheader,nounits",
    )
    listed = {int(p): int(m) for p, m in (line.split(", ") for line in out.splitlines())}
    rc2, used = smi(
        library_file,
        "-i",
        "1",
        "--query-gpu=memory.used,memory.total,memory.reserved",
        "--format=csv,noheader,nounits",
    )
    assert rc == rc2 == 0
    used_mib, total_mib, reserved_mib = (int(v) for v in used.strip().split(", "))
    assert sum(listed.values()) <= total_mib - reserved_mib
    assert abs(used_mib - (before.used >> 20) - sum(listed.values())) <= 2  # MiB rounding


def test_process_memory_fits_its_mig_device(pynvml: Any, node: Path, library_file: Path) -> None:
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(gpu, pynvml.NVML_DEVICE_MIG_ENABLE)
    ((gi, ci),) = one_1g(pynvml, gpu)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    size = pynvml.nvmlDeviceGetMemoryInfo(mig).total
    with LiveLayer.open(node, library=library_file) as records:
        records.put(
            Allocation(
                "m-a", pid=201, gpus=(0,), used_memory_bytes=size - (1 << 30), mig=((0, gi, ci),)
            )
        )
        records.put(
            Allocation("m-b", pid=202, gpus=(0,), used_memory_bytes=4 << 30, mig=((0, gi, ci),))
        )
    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)}
    assert procs == {201: size - (1 << 30), 202: 1 << 30}
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).used == size
