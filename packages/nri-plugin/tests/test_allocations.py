"""Allocation records from the container life cycle, through the runtime double over a real
unix socket, into a real staged overlay's live layer, read back through the real library
(nvidia-ml-py in a child process, as a node-level monitor reads it)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import Start, allocated, container, pod, read_through_library, run_container, settled
from nvml_mock_engine.config import resolve_config
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import Event
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import RuntimeDouble

GiB = 1 << 30


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    """A staged four-GPU H100 overlay (library, state, live layer)."""
    root = short_tmp / "overlay"
    stage(root, resolve_config(profile="h100", node="node-a", count=4), StageOptions(runtime=False))
    return root


def live_generation(overlay: Path) -> int:
    """The live file's write generation (every write of a record or value moves it)."""
    config = overlay / names.OVERLAY_CONFIG_DIR
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    with LiveLayer.open(config / names.LIVE_FILE_NAME, library=library, writable=False) as live:
        return live.generation


def live_records(overlay: Path) -> list[Allocation]:
    config = overlay / names.OVERLAY_CONFIG_DIR
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    with LiveLayer.open(config / names.LIVE_FILE_NAME, library=library, writable=False) as live:
        return live.list()


def nvml_view(overlay: Path) -> dict[str, object]:
    """Per GPU: its compute processes (pid, used memory) and used memory, through NVML."""
    # plain ctypes on the library's own entry points (this environment has no NVML binding)
    script = textwrap.dedent(
        """
        import ctypes, json, sys
        lib = ctypes.CDLL(sys.argv[1])
        class Proc(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                        ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
        class Mem(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                        ("used", ctypes.c_ulonglong)]
        class Util(ctypes.Structure):
            _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
        assert lib.nvmlInit_v2() == 0
        count = ctypes.c_uint()
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        out = {}
        for i in range(count.value):
            h = ctypes.c_void_p()
            assert lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
            procs = (Proc * 64)()
            n = ctypes.c_uint(64)
            assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), procs) == 0
            mem, util = Mem(), Util()
            assert lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0
            assert lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0
            out[str(i)] = {
                "procs": sorted([p.pid, p.used] for p in procs[: n.value]),
                "used": mem.used,
                "util": util.gpu,
            }
        print(json.dumps(out))
        """
    )
    return read_through_library(overlay, script)


async def test_start_records_stop_and_remove_clear(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("train", annotations={names.ANNOTATION_GPU_MEMORY: "20Gi"})
    cid = await run_container(
        runtime, sandbox, allocated("main", sandbox, cdi=["nvidia.com/gpu=2"]), 4242
    )
    records = live_records(overlay)
    assert [(r.container_id, r.pid, r.gpus, r.used_memory_bytes) for r in records] == [
        (cid, 4242, (2,), 20 * GiB)
    ]
    assert (records[0].pod, records[0].namespace, records[0].container_name) == (
        "train",
        "default",
        "main",
    )
    view = nvml_view(overlay)
    assert view["2"]["procs"] == [[4242, 20 * GiB]]  # type: ignore[index]
    assert view["1"]["procs"] == []  # type: ignore[index]
    assert view["2"]["used"] - view["1"]["used"] == 20 * GiB  # type: ignore[index, operator]
    await runtime.stop_container(sandbox, runtime.containers[cid])
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    assert nvml_view(overlay)["2"]["procs"] == []  # type: ignore[index]
    # a record that a stop missed goes at removal
    cid2 = await run_container(runtime, sandbox, allocated("again", sandbox, gpus="1"), 77)
    assert [r.gpus for r in live_records(overlay)] == [(1,)]
    await runtime.remove_container(sandbox, cid2)
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    # every life-cycle event went on its own RPC: nothing a containerd 2.3+ would list as
    # the deprecated StateChange interface
    assert runtime.deprecations == []


async def test_ambient_containers_and_excluded_pods_record_nothing(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--excluded-namespaces", "batch")
    plain = pod("plain")
    await run_container(runtime, plain, allocated("main", plain), 10)
    opted_out = pod("out", annotations={names.ANNOTATION_INJECT: "false"})
    await run_container(runtime, opted_out, allocated("main", opted_out, gpus="0"), 11)
    excluded = pod("job", namespace="batch")
    await run_container(runtime, excluded, allocated("main", excluded, gpus="0"), 12)
    assert live_records(overlay) == []


async def test_device_nodes_of_the_device_opt_in_are_no_allocation(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """On a real node NVIDIA's device plugin, given the GPU device nodes by the device
    opt-in, was listed on every GPU with half its memory. Device nodes a device plugin put
    in the container (then the plugin sets the matching NVIDIA_VISIBLE_DEVICES) still count,
    and so does the container's own env."""
    await start_plugin(
        "--overlay-host-path", str(overlay), "--device-namespaces", "nvidia-device-plugin"
    )
    software = pod("dp", "nvidia-device-plugin", {names.ANNOTATION_DEVICES: "true"})
    made = container("plugin")
    made.pod_sandbox_id = software.id
    cid = await run_container(runtime, software, made, 31)
    given = [d.path for d in runtime.containers[cid].linux.devices]
    assert [f"/dev/nvidia{i}" for i in range(4)] == [p for p in given if p[-1].isdigit()]
    assert live_records(overlay) == []
    assert nvml_view(overlay)["0"]["procs"] == []  # type: ignore[index]
    # a synchronize (plugin restart) sees the same container and still records nothing
    await start_plugin(
        "--overlay-host-path", str(overlay), "--device-namespaces", "nvidia-device-plugin"
    )
    assert live_records(overlay) == []
    # a device plugin's device-list allocation: the nodes were in the container already
    job = pod("job")
    listed = container("main", devices=["/dev/nvidia2"])
    listed.pod_sandbox_id = job.id
    await run_container(runtime, job, listed, 33)
    # the opted-in pod's own env allocation
    env_given = container("env", env=["NVIDIA_VISIBLE_DEVICES=3"])
    env_given.pod_sandbox_id = software.id
    await run_container(runtime, software, env_given, 34)
    assert sorted((r.pid, r.gpus) for r in live_records(overlay)) == [(33, (2,)), (34, (3,))]


async def test_two_containers_sharing_a_gpu_sum_memory_and_utilization(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    a = pod(
        "a",
        annotations={names.ANNOTATION_GPU_MEMORY: "4Gi", names.ANNOTATION_GPU_UTILIZATION: "30"},
    )
    b = pod(
        "b",
        annotations={
            names.ANNOTATION_GPU_MEMORY: "6Gi",
            names.ANNOTATION_GPU_UTILIZATION: "steady 50",
        },
    )
    await run_container(runtime, a, allocated("main", a, gpus="3"), 100)
    await run_container(runtime, b, allocated("main", b, cdi=["nvidia.com/gpu=3"]), 101)
    view = nvml_view(overlay)
    assert view["3"]["procs"] == [[100, 4 * GiB], [101, 6 * GiB]]  # type: ignore[index]
    assert view["3"]["used"] - view["0"]["used"] == 10 * GiB  # type: ignore[index, operator]
    assert view["3"]["util"] == 80  # type: ignore[index]


async def test_the_default_memory_is_the_configured_share_of_the_gpu(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--gpu-memory-share", "0.25")
    bad = pod("p", annotations={names.ANNOTATION_GPU_MEMORY: "lots"})
    await run_container(runtime, bad, allocated("main", bad, gpus="0"), 5)
    (record,) = live_records(overlay)
    total = 81559 * (1 << 20)  # the H100 profile's framebuffer
    assert record.used_memory_bytes == pytest.approx(total // 4, rel=0.01)


async def test_a_plugin_restart_mid_run_leaves_nothing_behind_and_loses_nothing(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    first = await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("keep")
    kept = await run_container(runtime, sandbox, allocated("kept", sandbox, gpus="0"), 1)
    gone = await run_container(runtime, sandbox, allocated("gone", sandbox, gpus="1"), 2)
    first.service.stop()
    await first.exit_code()
    # while the plugin is away, one container stops and is removed, another starts
    runtime.containers.pop(gone)
    late = allocated("late", sandbox, gpus="2")
    late.state = api.CONTAINER_RUNNING
    late.pid = 3
    runtime.add_container(late)
    runtime.add_pod(sandbox)
    assert {r.container_id for r in live_records(overlay)} == {kept, gone}
    await start_plugin("--overlay-host-path", str(overlay))
    records = {r.container_id: (r.pid, r.gpus) for r in live_records(overlay)}
    assert records == {kept: (1, (0,)), late.id: (3, (2,))}


async def test_a_live_layer_that_cannot_be_written_never_fails_a_container(
    runtime: RuntimeDouble, start_plugin: Start, short_tmp: Path
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(short_tmp / "not-staged"))
    sandbox = pod("p")
    cid = await run_container(runtime, sandbox, allocated("main", sandbox, gpus="0"), 9)
    assert runtime.containers[cid].state == api.CONTAINER_RUNNING
    ready = await plugin.get("/readyz")
    assert "allocation records not written" in ready.text
    assert "not-staged" in ready.text
    assert await plugin.metric("nvml_mock_nri_allocation_errors_total") >= 1


@pytest.mark.parametrize("runtime", [False], indirect=True, ids=["state-change-only"])
async def test_an_older_runtime_sending_state_change_records_and_clears_alike(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """containerd before 2.3 (NRI before v0.12) sends Start, PostStart and Remove on
    StateChange only: the records come and go as on a current runtime."""
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("train")
    cid = await run_container(runtime, sandbox, allocated("main", sandbox, gpus="3"), 99)
    assert [(r.container_id, r.pid, r.gpus) for r in live_records(overlay)] == [(cid, 99, (3,))]
    await runtime.remove_container(sandbox, cid)
    await settled(runtime, sandbox)
    assert live_records(overlay) == []


async def test_remove_after_stop_and_containers_without_gpus_write_nothing(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """The record goes at StopContainer; the RemoveContainer after it, and every event of a
    container without GPUs, leave the file untouched (its generation does not move)."""
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("train")
    cid = await run_container(runtime, sandbox, allocated("main", sandbox, gpus="2"), 4242)
    assert [(r.pid, r.gpus) for r in live_records(overlay)] == [(4242, (2,))]
    await runtime.stop_container(sandbox, runtime.containers[cid])
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    before = live_generation(overlay)
    await runtime.remove_container(sandbox, cid)
    await settled(runtime, sandbox)
    made = container("plain")
    made.pod_sandbox_id = sandbox.id
    plain = await run_container(runtime, sandbox, made, 5)
    await runtime.stop_container(sandbox, runtime.containers[plain])
    await settled(runtime, sandbox)
    await runtime.remove_container(sandbox, plain)
    await settled(runtime, sandbox)
    assert live_generation(overlay) == before


async def test_a_restage_between_start_and_post_start_records_for_the_new_gpus(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """StartContainer packs the record for the live file of its moment; a re-stage of other
    GPUs before PostStartContainer replaces that file, and the record is derived again for
    the new one (its GPU 3 is gone: the container holds GPU 1 only)."""
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("train")
    result = await runtime.create_container(sandbox, allocated("main", sandbox, gpus="1,3"))
    stored = runtime.containers[result.container.id]
    await runtime.state_change(Event.START_CONTAINER, sandbox, stored)
    await settled(runtime, sandbox)
    stage(overlay, resolve_config(profile="h100", node="node-a", count=2), StageOptions())
    stored.state, stored.pid = api.CONTAINER_RUNNING, 7070
    await runtime.state_change(Event.POST_START_CONTAINER, sandbox, stored)
    await settled(runtime, sandbox)
    assert [(r.pid, r.gpus) for r in live_records(overlay)] == [(7070, (1,))]


async def test_the_record_is_written_once_with_the_pid_at_post_start(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    # StartContainer comes before the container's task runs (no PID): the record is derived
    # there and written once, with the PID, at PostStartContainer.
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("train")
    result = await runtime.create_container(sandbox, allocated("main", sandbox, gpus="3"))
    stored = runtime.containers[result.container.id]
    before = live_generation(overlay)
    await runtime.state_change(Event.START_CONTAINER, sandbox, stored)
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    assert live_generation(overlay) == before, "StartContainer writes nothing"
    stored.state = api.CONTAINER_RUNNING
    stored.pid = 5150
    await runtime.state_change(Event.POST_START_CONTAINER, sandbox, stored)
    await settled(runtime, sandbox)
    assert [(r.pid, r.gpus) for r in live_records(overlay)] == [(5150, (3,))]
    # a start that failed is stopped before any PostStart: nothing recorded, nothing kept
    failed = await runtime.create_container(sandbox, allocated("failed", sandbox, gpus="2"))
    kept = runtime.containers[failed.container.id]
    await runtime.state_change(Event.START_CONTAINER, sandbox, kept)
    await settled(runtime, sandbox)
    await runtime.stop_container(sandbox, kept)
    await settled(runtime, sandbox)
    assert [r.gpus for r in live_records(overlay)] == [(3,)]
    # a PostStart without an earlier StartContainer (a plugin restarted in between) records
    late = await runtime.create_container(sandbox, allocated("late", sandbox, gpus="1"))
    other = runtime.containers[late.container.id]
    other.state, other.pid = api.CONTAINER_RUNNING, 6160
    await runtime.state_change(Event.POST_START_CONTAINER, sandbox, other)
    await settled(runtime, sandbox)
    assert sorted((r.pid, r.gpus) for r in live_records(overlay)) == [(5150, (3,)), (6160, (1,))]


async def test_after_synchronize_a_removal_after_the_stop_touches_no_file(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    # the overlay has a live layer, so Synchronize rewrites the records: from then on the
    # plugin knows which containers it recorded, and a stop's RemoveContainer (or the stop
    # of a container without GPUs) has nothing to remove: no lock, no pass over the records
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    recorder = plugin.service.injector.recorder
    opened = 0
    original = recorder._open

    def counting() -> LiveLayer:
        nonlocal opened
        opened += 1
        return original()

    recorder._open = counting  # type: ignore[method-assign]
    sandbox = pod("train")
    cid = await run_container(runtime, sandbox, allocated("main", sandbox, gpus="0"), 99)
    plain = await run_container(runtime, sandbox, container("plain"), 100)
    assert [r.gpus for r in live_records(overlay)] == [(0,)]
    await runtime.stop_container(sandbox, runtime.containers[cid])
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    before = opened
    await runtime.remove_container(sandbox, cid)
    await settled(runtime, sandbox)
    await runtime.stop_container(sandbox, runtime.containers[plain])
    await settled(runtime, sandbox)
    await runtime.remove_container(sandbox, plain)
    await settled(runtime, sandbox)
    assert opened == before, "nothing to remove: the live layer is not even opened"
