"""Containers given MIG devices (``MIG-<uuid>``, ``<gpu>:<mig>``, CDI ``nvidia.com/gpu=…``),
through the runtime double over a real unix socket, into a staged overlay whose GPU 1 is in
MIG mode, read back through the real library in a child process (as a node-level monitor
reads it): the process shows on the parent GPU with its instance ids, and its memory on that
MIG device."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import Start, allocated, pod, read_through_library, run_container, settled
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import StageError
from nvml_mock_engine.mig_layout import apply, parse_spec
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_protocol import names
from nvml_mock_protocol.nri.runtime import RuntimeDouble

GiB = 1 << 30
NO_INSTANCE = 0xFFFFFFFF
H100_MEMORY = 81559 * (1 << 20)  # the H100 profile's framebuffer
LAYOUT = [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    """A staged four-GPU H100 overlay whose GPU 1 holds two 1g.10gb and one 3g.40gb."""
    root = short_tmp / "overlay"
    config = resolve_config(profile="h100", node="node-a", count=4)
    plan = parse_spec(LAYOUT, config.profile.mig, config.count)
    stage(root, config, StageOptions(runtime=False, devices=False, imex_channels=0, mig=plan))
    return root


def paths(overlay: Path) -> tuple[Path, Path, Path]:
    config = overlay / names.OVERLAY_CONFIG_DIR
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    return library, config / names.STATE_FILE_NAME, config / names.LIVE_FILE_NAME


def live_records(overlay: Path) -> list[Allocation]:
    library, _, live = paths(overlay)
    with LiveLayer.open(live, library=library, writable=False) as opened:
        return opened.list()


def nvml_view(overlay: Path) -> dict[str, object]:
    """GPU 1's compute processes (pid, used, gi, ci), and each of its MIG devices' UUID,
    instance ids and used memory, through the library's own entry points."""
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
        assert lib.nvmlInit_v2() == 0
        h = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h)) == 0
        procs = (Proc * 64)()
        n = ctypes.c_uint(64)
        assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), procs) == 0
        devices = []
        for i in range(7):
            m = ctypes.c_void_p()
            if lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i, ctypes.byref(m)) != 0:
                break
            uuid = ctypes.create_string_buffer(96)
            assert lib.nvmlDeviceGetUUID(m, uuid, 96) == 0
            gi, ci, mem = ctypes.c_uint(), ctypes.c_uint(), Mem()
            assert lib.nvmlDeviceGetGpuInstanceId(m, ctypes.byref(gi)) == 0
            assert lib.nvmlDeviceGetComputeInstanceId(m, ctypes.byref(ci)) == 0
            assert lib.nvmlDeviceGetMemoryInfo(m, ctypes.byref(mem)) == 0
            devices.append([uuid.value.decode(), gi.value, ci.value, mem.used])
        print(json.dumps({
            "procs": [[p.pid, p.used, p.gi, p.ci] for p in procs[: n.value]],
            "devices": devices,
        }))
        """
    )
    return read_through_library(overlay, script)


async def test_a_mig_device_by_index_is_held_on_its_parent_with_its_ids(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--gpu-memory-share", "0.5")
    sandbox = pod("infer")
    cid = await run_container(runtime, sandbox, allocated("main", sandbox, gpus="1:1"), 4242)
    before = nvml_view(overlay)
    devices = before["devices"]
    assert isinstance(devices, list) and len(devices) == 3
    _, gi, ci, used = devices[1]
    (record,) = live_records(overlay)
    assert (record.container_id, record.gpus, record.mig) == (cid, (1,), ((1, gi, ci),))
    # the default share is of the MIG device: one memory slice of eight
    assert record.used_memory_bytes == H100_MEMORY // 8 // 2
    assert before["procs"] == [[4242, record.used_memory_bytes, gi, ci]]
    assert used == record.used_memory_bytes
    assert [d[3] for d in devices if d != devices[1]] == [0, 0]
    await runtime.stop_container(sandbox, runtime.containers[cid])
    await settled(runtime, sandbox)
    assert live_records(overlay) == []
    assert nvml_view(overlay)["procs"] == []


async def test_a_mig_device_by_uuid_in_env_or_cdi_and_a_whole_gpu_together(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    devices = nvml_view(overlay)["devices"]
    assert isinstance(devices, list)
    (uuid0, gi0, ci0, _), (uuid2, gi2, ci2, _) = devices[0], devices[2]
    sandbox = pod("train", annotations={names.ANNOTATION_GPU_MEMORY: "2Gi"})
    await run_container(runtime, sandbox, allocated("env", sandbox, gpus=f"{uuid0.lower()},3"), 11)
    await run_container(
        runtime, sandbox, allocated("cdi", sandbox, cdi=[f"nvidia.com/gpu={uuid2}"]), 12
    )
    held = sorted((r.pid, r.gpus, r.mig, r.used_memory_bytes) for r in live_records(overlay))
    assert held == [
        (11, (1, 3), ((1, gi0, ci0),), 2 * GiB),
        (12, (1,), ((1, gi2, ci2),), 2 * GiB),
    ]
    assert sorted(nvml_view(overlay)["procs"]) == [  # type: ignore[type-var]
        [11, 2 * GiB, gi0, ci0],
        [12, 2 * GiB, gi2, ci2],
    ]


async def test_mig_entries_naming_no_mig_device_of_the_node_are_left_out(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("p")
    await run_container(runtime, sandbox, allocated("a", sandbox, gpus="1:7"), 5)
    await run_container(
        runtime, sandbox, allocated("b", sandbox, gpus="0:0"), 6
    )  # GPU 0 has no MIG
    assert live_records(overlay) == []
    await run_container(runtime, sandbox, allocated("c", sandbox, gpus="MIG-0000-bogus,1:0"), 7)
    (record,) = live_records(overlay)
    assert (record.pid, record.gpus, len(record.mig)) == (7, (1,), 1)
    assert "allocation names no GPU of this node: MIG-0000-bogus" in caplog.text


async def test_an_instance_a_running_container_holds_cannot_be_destroyed(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """A real driver refuses to destroy a GPU or compute instance a process runs on: a
    re-partition while the container runs fails naming the reason (the instances nobody
    holds may go first, as on a real node), and the held instance, the record and its ids
    stay as they were."""
    await start_plugin("--overlay-host-path", str(overlay), "--gpu-memory-share", "0.5")
    sandbox = pod("p")
    await run_container(runtime, sandbox, allocated("main", sandbox, gpus="1:2"), 99)
    before = nvml_view(overlay)
    devices = before["devices"]
    assert isinstance(devices, list)
    _, gi, ci, _ = devices[2]
    library, state, _ = paths(overlay)
    config = resolve_config(profile="h100", node="node-a", count=4)
    cleared = parse_spec([{"devices": [1], "mig-enabled": True}], config.profile.mig, 4)
    with pytest.raises(StageError, match="In use by another client"):
        apply(cleared, library, state)
    (record,) = live_records(overlay)
    assert record.mig == ((1, gi, ci),)
    view = nvml_view(overlay)
    assert devices[2] in view["devices"]
    assert view["procs"] == [[99, record.used_memory_bytes, gi, ci]]
