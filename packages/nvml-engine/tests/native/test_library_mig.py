"""MIG through nvidia-ml-py, on every MIG-capable profile the engine ships.

The board's profile table is the rendered state's; the layout is the live layer's MIG record,
so these tests render a real profile, create a live layer beside it and drive the library the
way mig-parted, the device plugin and nvidia-smi do.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import needs_mount_namespaces, read_only_bind
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.profiles import load_profile, profile_names
from nvml_mock_engine.render import render_text

MIG_BOARDS = [name for name in profile_names() if load_profile(name).mig]


def stage(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profile: str) -> Path:
    """Render a two-GPU node of *profile* with a live layer, and initialise NVML on it."""
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="mig-node", profile=profile, count=2)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    pynvml.nvmlInit()
    return state


def enabled(pynvml: Any, index: int = 0) -> Any:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
    return handle


def profiles_of(pynvml: Any, handle: Any) -> list[Any]:
    """Every GPU-instance profile the board offers, enumerated as real clients do."""
    found = []
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            found.append(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index))
        except pynvml.NVMLError_NotSupported:
            continue
    return found


def gpu_instances(pynvml: Any, handle: Any, info: Any) -> list[Any]:
    """nvmlDeviceGetGpuInstances with a buffer of the profile's instance count (its contract)."""
    array = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, info.id, array, ctypes.byref(count))
    return list(array[: count.value])


def placements(pynvml: Any, handle: Any, info: Any) -> set[tuple[int, int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
    return {(p.start, p.size) for p in array[: count.value]}


def code(pynvml: Any, call: Any, *args: Any) -> int:
    try:
        call(*args)
    except pynvml.NVMLError as exc:
        return int(exc.value)
    return 0


def test_mode_starts_disabled_and_enables(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stage(pynvml, monkeypatch, tmp_path, "h100")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0
    assert code(pynvml, pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, 0) == (
        pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    assert pynvml.nvmlDeviceSetMigMode(handle, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    other = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetMigMode(other) == [0, 0]
    # a GPU in MIG mode has no whole-GPU utilization; one without MIG still has it
    assert code(pynvml, pynvml.nvmlDeviceGetUtilizationRates, handle) == (
        pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    assert pynvml.nvmlDeviceGetUtilizationRates(other).gpu >= 0


def test_boards_without_mig_answer_not_supported(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stage(pynvml, monkeypatch, tmp_path, "l40s")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for call, args in (
        (pynvml.nvmlDeviceGetMigMode, ()),
        (pynvml.nvmlDeviceSetMigMode, (1,)),
        (pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (0,)),
    ):
        assert code(pynvml, call, handle, *args) == pynvml.NVML_ERROR_NOT_SUPPORTED


@pytest.mark.parametrize("board", MIG_BOARDS)
def test_every_profile_creates_until_full(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, board: str
) -> None:
    stage(pynvml, monkeypatch, tmp_path, board)
    handle = enabled(pynvml)
    table = {p.profile: p for p in load_profile(board).mig}
    infos = profiles_of(pynvml, handle)
    assert sorted(i.id for i in infos) == sorted(p.id for p in table.values())
    for info in infos:
        declared = next(p for p in table.values() if p.id == info.id)
        assert (info.sliceCount, info.memorySizeMB, info.multiprocessorCount) == (
            declared.slices,
            declared.memory_mib,
            declared.sms,
        )
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == (
            info.instanceCount
        )
        created = []
        while True:
            try:
                created.append(pynvml.nvmlDeviceCreateGpuInstance(handle, info.id))
            except pynvml.NVMLError_InsufficientResources:
                break
        assert len(created) == info.instanceCount
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == 0
        assert len(gpu_instances(pynvml, handle, info)) == info.instanceCount
        possible = placements(pynvml, handle, info)
        assert len(possible) >= info.instanceCount
        for gi in created:
            got = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert got.profileId == info.id
            assert (got.placement.start, got.placement.size) in possible
            pynvml.nvmlGpuInstanceDestroy(gi)
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == (
            info.instanceCount
        )


@pytest.mark.parametrize("board", MIG_BOARDS)
def test_compute_instances_fill_a_full_gpu_instance(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, board: str
) -> None:
    stage(pynvml, monkeypatch, tmp_path, board)
    handle = enabled(pynvml)
    full = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    gi = pynvml.nvmlDeviceCreateGpuInstance(handle, full.id)
    one = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    assert one.instanceCount == 7
    cis = [pynvml.nvmlGpuInstanceCreateComputeInstance(gi, one.id) for _ in range(7)]
    assert code(pynvml, pynvml.nvmlGpuInstanceCreateComputeInstance, gi, one.id) == (
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    )
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, one.id) == 0
    assert sorted(pynvml.nvmlComputeInstanceGetInfo(ci).id for ci in cis) == list(range(7))
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    name = load_profile(board).name
    assert pynvml.nvmlDeviceGetName(mig) == f"{name} MIG 1c.{full.name.removeprefix('MIG ')}"
    assert pynvml.nvmlDeviceGetAttributes(mig).computeInstanceSliceCount == 1
    assert pynvml.nvmlDeviceGetAttributes(mig).gpuInstanceSliceCount == 7
    assert code(pynvml, pynvml.nvmlGpuInstanceDestroy, gi) == pynvml.NVML_ERROR_IN_USE
    for ci in cis:
        pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert code(pynvml, pynvml.nvmlGpuInstanceGetInfo, gi) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_placement_errors(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stage(pynvml, monkeypatch, tmp_path, "h100")
    handle = enabled(pynvml)
    three = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
    )
    place = pynvml.c_nvmlGpuInstancePlacement_t()
    place.start, place.size = 2, 4  # not a placement of a 3g instance
    create = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement
    assert (
        code(pynvml, create, handle, three.id, ctypes.byref(place))
        == pynvml.NVML_ERROR_INVALID_ARGUMENT
    )
    place.start, place.size = 4, 2
    assert (
        code(pynvml, create, handle, three.id, ctypes.byref(place))
        == pynvml.NVML_ERROR_INVALID_ARGUMENT
    )
    place.start, place.size = 4, 4
    gi = create(handle, three.id, ctypes.byref(place))
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == 2  # the upper half is id 2
    assert code(pynvml, create, handle, three.id, ctypes.byref(place)) == (
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    )
    one = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0)
    place.start, place.size = 5, 1  # inside the 3g instance
    assert (
        code(pynvml, create, handle, one.id, ctypes.byref(place))
        == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    )
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, one.id) == 4
    assert code(pynvml, pynvml.nvmlDeviceCreateGpuInstance, handle, 99) == (
        pynvml.NVML_ERROR_INVALID_ARGUMENT
    )
    assert code(pynvml, pynvml.nvmlDeviceGetGpuInstanceById, handle, 1) == (  # lower half free
        pynvml.NVML_ERROR_NOT_FOUND
    )
    assert code(pynvml, pynvml.nvmlDeviceSetMigMode, handle, 0) == pynvml.NVML_ERROR_IN_USE


def test_create_needs_mig_enabled(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stage(pynvml, monkeypatch, tmp_path, "a100")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert code(pynvml, pynvml.nvmlDeviceCreateGpuInstance, handle, 19) == (
        pynvml.NVML_ERROR_NOT_SUPPORTED
    )


def test_busy_gpu_keeps_the_mode_pending(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library_file: Path
) -> None:
    state = stage(pynvml, monkeypatch, tmp_path, "h100")
    with live.LiveLayer.open(state.parent / live.LIVE_FILE_NAME) as layer:
        layer.set(0, {"memory_used_bytes": 1 << 30})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    status = pynvml.nvmlDeviceSetMigMode(handle, 1)
    assert status == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 1]
    # a GPU reset (nvidia-smi -r) makes the pending mode current
    from nvml_mock_smi import main

    assert main(["-r", "-i", "0", "--nvml-lib", str(library_file)]) == 0
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]


def test_a_bad_profile_line_is_refused_at_init(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "state.nvmlmock"
    text = render_text(resolve_config(node="mig-node", profile="h100", count=1))
    bad = text.replace("mig_gi_profile=4,0,7g.80gb,1,7,", "mig_gi_profile=4,0,7g.80gb,1,9,")
    assert bad != text
    state.write_text(bad)
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlInit()
    detail = pynvml.nvmlErrorString(caught.value.value)
    assert "mig_gi_profile" in detail and "slices" in detail


def _layout(pynvml: Any, handle: Any) -> list[str]:
    uuids = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:
            break
        uuids.append(pynvml.nvmlDeviceGetUUID(mig))
    return uuids


def _balanced(pynvml: Any, handle: Any) -> None:
    for index in (
        pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
    ):
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        gi = pynvml.nvmlDeviceCreateGpuInstance(handle, info.id)
        # the compute instance that spans the GPU instance (profiles 0..2 are 1..3 slices)
        ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, info.sliceCount - 1, 0)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)


def test_mig_devices_are_seen_by_other_processes_and_keep_their_uuids(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library_file: Path
) -> None:
    stage(pynvml, monkeypatch, tmp_path, "h100")
    handle = enabled(pynvml)
    _balanced(pynvml, handle)
    first = _layout(pynvml, handle)
    assert len(first) == 3 and all(u.startswith("MIG-") for u in first)
    script = textwrap.dedent(
        """
        import ctypes, json, sys
        ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = []
        for i in range(3):
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            out.append([pynvml.nvmlDeviceGetUUID(m), pynvml.nvmlDeviceGetName(m),
                        pynvml.nvmlDeviceGetMemoryInfo(m).total >> 20])
        print(json.dumps(out))
        """
    )
    # The child gets only the state, plus the sanitizer runtime when this run has one
    # (make asan-check preloads it; an ASan library refuses to load without it).
    sanitizer = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")
    env = {k: os.environ[k] for k in sanitizer if k in os.environ}
    env["MOCK_NVML_CONFIG"] = str(tmp_path / "state.nvmlmock")
    seen = json.loads(
        subprocess.run(
            [sys.executable, "-c", script, str(library_file)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert [row[0] for row in seen] == first
    assert [row[1] for row in seen] == [
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "NVIDIA H100 80GB HBM3 MIG 2g.20gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    ]
    assert [row[2] for row in seen] == [40448, 20096, 9984]
    mig = pynvml.nvmlDeviceGetHandleByUUID(first[1])
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(handle)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 0
    # the same layout made again gets the same UUIDs
    for index in range(3):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(
            gi, pynvml.nvmlDeviceGetComputeInstanceId(mig)
        )
        pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(gi)
        del index
    assert _layout(pynvml, handle) == []
    _balanced(pynvml, handle)
    assert _layout(pynvml, handle) == first


@needs_mount_namespaces
def test_a_read_only_overlay_gets_no_permission(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, library_file: Path
) -> None:
    stage(pynvml, monkeypatch, tmp_path, "h100")
    enabled(pynvml)
    mount = tmp_path / "container"
    mount.mkdir()
    script = (
        "import ctypes, sys; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
        "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
        "print(pynvml.nvmlDeviceGetMigMode(h))\n"
        "try:\n    pynvml.nvmlDeviceCreateGpuInstance(h, 19)\n"
        "except pynvml.NVMLError as e:\n    print(int(e.value))\n"
    )
    shell = read_only_bind(tmp_path, mount) + (
        f"MOCK_NVML_CONFIG={mount}/state.nvmlmock {sys.executable} -c {shlex.quote(script)}"
        f" {library_file}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, check=True
    )
    assert proc.stdout.split() == ["[1,", "1]", str(pynvml.NVML_ERROR_NO_PERMISSION)]
