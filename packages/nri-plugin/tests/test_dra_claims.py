"""Containers given claims by NVIDIA's DRA driver, as the runtime hands them over after
applying the driver's CDI specs: the CDI names, the device nodes of the spec's edits and its
``NVIDIA_VISIBLE_DEVICES=void``. Through the runtime double over a real unix socket, into a
staged four-GPU overlay whose GPU 1 is in MIG mode; what the container sees is read back
through the real library in a child process with the env the plugin set."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import Start, container, pod, read_through_library, settled
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.mig_layout import parse_spec
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri import selection as dra
from nvml_mock_protocol import names
from nvml_mock_protocol.mig_caps import MigCap, minor_of
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import PluginError
from nvml_mock_protocol.nri.runtime import RuntimeDouble

CLAIM = "0c6f5f2e-3f7d-4d2a-9b1e-5a0c1d2e3f40"
OTHER = "7d1c9b2a-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
LAYOUT = [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    root = short_tmp / "overlay"
    config = resolve_config(profile="h100", node="node-a", count=4)
    plan = parse_spec(LAYOUT, config.profile.mig, config.count)
    stage(root, config, StageOptions(runtime=False, devices=False, imex_channels=0, mig=plan))
    return root


def paths(overlay: Path) -> tuple[Path, Path, Path]:
    config = overlay / names.OVERLAY_CONFIG_DIR
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    return library, config / names.STATE_FILE_NAME, config / names.LIVE_FILE_NAME


def records(overlay: Path) -> list[Allocation]:
    library, _, live = paths(overlay)
    with LiveLayer.open(live, library=library, writable=False) as opened:
        return opened.list()


def host_view(overlay: Path) -> dict[str, object]:
    """Every GPU's UUID and GPU 1's MIG devices (UUID, GI, CI), as the node sees them."""
    script = textwrap.dedent(
        """
        import ctypes, json, sys
        lib = ctypes.CDLL(sys.argv[1])
        assert lib.nvmlInit_v2() == 0
        n = ctypes.c_uint()
        lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        uuids, mig = [], []
        for i in range(n.value):
            h = ctypes.c_void_p()
            lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
            b = ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetUUID(h, b, 96)
            uuids.append(b.value.decode())
            if i == 1:
                for k in range(7):
                    m = ctypes.c_void_p()
                    if lib.nvmlDeviceGetMigDeviceHandleByIndex(h, k, ctypes.byref(m)) != 0:
                        break
                    lib.nvmlDeviceGetUUID(m, b, 96)
                    gi, ci = ctypes.c_uint(), ctypes.c_uint()
                    lib.nvmlDeviceGetGpuInstanceId(m, ctypes.byref(gi))
                    lib.nvmlDeviceGetComputeInstanceId(m, ctypes.byref(ci))
                    mig.append([b.value.decode(), gi.value, ci.value])
        print(json.dumps({"uuids": uuids, "mig": mig}))
        """
    )
    return read_through_library(overlay, script)


def container_view(overlay: Path, env: list[str]) -> object:
    """What NVML shows a process with the container's final env: per GPU its index, UUID
    and the MIG devices it shows under it."""
    library, state, _ = paths(overlay)
    script = textwrap.dedent(
        """
        import ctypes, json, sys
        lib = ctypes.CDLL(sys.argv[1])
        rc = lib.nvmlInit_v2()
        if rc != 0:
            print(json.dumps({"init": rc})); sys.exit(0)
        n = ctypes.c_uint()
        lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        out = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
            b = ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetUUID(h, b, 96)
            migs = []
            for k in range(7):
                m = ctypes.c_void_p()
                if lib.nvmlDeviceGetMigDeviceHandleByIndex(h, k, ctypes.byref(m)) != 0:
                    break
                mb = ctypes.create_string_buffer(96)
                lib.nvmlDeviceGetUUID(m, mb, 96)
                migs.append(mb.value.decode())
            out.append([i, b.value.decode(), migs])
        print(json.dumps(out))
        """
    )
    environ = {"PATH": "/usr/bin:/bin", names.ENV_MOCK_NVML_CONFIG: str(state)}
    for entry in env:
        key, _, value = entry.partition("=")
        if key in (names.ENV_NVIDIA_VISIBLE_DEVICES, names.ENV_MOCK_NVML_VISIBLE_DEVICES):
            environ[key] = value
    done = subprocess.run(
        [sys.executable, "-c", script, str(library)],
        check=True,
        capture_output=True,
        text=True,
        env=environ,
    )
    return json.loads(done.stdout)


def given(
    name: str, sandbox: api.PodSandbox, cdi: list[str], devices: list[str], env: str = "void"
) -> api.Container:
    """A container as the runtime hands it over after applying the DRA driver's specs."""
    made = container(
        name,
        env=["PATH=/usr/bin:/bin", f"NVIDIA_VISIBLE_DEVICES={env}"],
        devices=["/dev/nvidiactl", "/dev/nvidia-uvm", *devices],
        cdi=cdi,
    )
    made.pod_sandbox_id = sandbox.id
    return made


def cap_nodes(gpu: int, gi: int, ci: int) -> list[str]:
    return [
        f"/dev/nvidia-caps/nvidia-cap{minor_of(MigCap(gpu, gi))}",
        f"/dev/nvidia-caps/nvidia-cap{minor_of(MigCap(gpu, gi, ci))}",
    ]


async def test_a_gpu_claim_sees_exactly_its_gpu_and_is_recorded_on_it(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    uuids = host_view(overlay)["uuids"]
    assert isinstance(uuids, list)
    sandbox = pod("train")
    made = given("main", sandbox, [f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-2"], ["/dev/nvidia2"])
    result = await runtime.create_container(sandbox, made)
    assert f"{names.ENV_NVIDIA_VISIBLE_DEVICES}=2" in result.container.env
    assert container_view(overlay, list(result.container.env)) == [[0, uuids[2], []]]
    await runtime.start_container(sandbox, result.container.id, 4100)
    await settled(runtime, sandbox)
    (record,) = records(overlay)
    assert (record.pid, record.gpus, record.mig) == (4100, (2,), ())
    await runtime.stop_container(sandbox, runtime.containers[result.container.id])
    await settled(runtime, sandbox)
    assert records(overlay) == []


async def test_a_mig_claim_sees_exactly_the_mig_device_it_can_open(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    view = host_view(overlay)
    mig, uuids = view["mig"], view["uuids"]
    assert isinstance(mig, list) and len(mig) == 3 and isinstance(uuids, list)
    uuid, gi, ci = mig[2]
    sandbox = pod("infer")
    name = f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-1-mig-3g40gb-9-4"
    made = given("main", sandbox, [name], ["/dev/nvidia1", *cap_nodes(1, gi, ci)])
    result = await runtime.create_container(sandbox, made)
    assert f"{names.ENV_NVIDIA_VISIBLE_DEVICES}={uuid}" in result.container.env
    assert container_view(overlay, list(result.container.env)) == [[0, uuids[1], [uuid]]]
    await runtime.start_container(sandbox, result.container.id, 4200)
    await settled(runtime, sandbox)
    (record,) = records(overlay)
    assert (record.pid, record.gpus, record.mig) == (4200, (1,), ((1, gi, ci),))


async def test_a_channel_claim_alone_sees_no_gpu_and_holds_none(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("imex")
    made = given(
        "main",
        sandbox,
        [f"{dra.CD_CLAIM_KIND}={CLAIM}-channel-0", f"{dra.CD_DEVICE_KIND}=all"],
        ["/dev/nvidia-caps-imex-channels/channel0"],
    )
    result = await runtime.create_container(sandbox, made)
    assert f"{names.ENV_NVIDIA_VISIBLE_DEVICES}=none" in result.container.env
    # no GPU: the library's nvmlInit answers NVML_ERROR_GPU_NOT_FOUND for "none"
    assert container_view(overlay, list(result.container.env)) == {"init": 28}
    await runtime.start_container(sandbox, result.container.id, 4300)
    await settled(runtime, sandbox)
    assert records(overlay) == []


async def test_gpu_and_channel_claims_together_see_the_gpu(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    uuids = host_view(overlay)["uuids"]
    assert isinstance(uuids, list)
    sandbox = pod("nvbandwidth")
    made = given(
        "main",
        sandbox,
        [f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-3", f"{dra.CD_CLAIM_KIND}={OTHER}-channel-0"],
        ["/dev/nvidia3", "/dev/nvidia-caps-imex-channels/channel0"],
    )
    result = await runtime.create_container(sandbox, made)
    assert container_view(overlay, list(result.container.env)) == [[0, uuids[3], []]]


async def test_a_value_the_pod_set_itself_stays(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("own")
    made = given(
        "main", sandbox, [f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-2"], ["/dev/nvidia2"], env="0,1"
    )
    result = await runtime.create_container(sandbox, made)
    visible = [e for e in result.container.env if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
    assert visible == ["NVIDIA_VISIBLE_DEVICES=0,1"]


async def test_mig_capability_nodes_without_cdi_names_narrow_to_the_mig_device(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    view = host_view(overlay)
    mig, uuids = view["mig"], view["uuids"]
    assert isinstance(mig, list) and isinstance(uuids, list)
    uuid, gi, ci = mig[0]
    sandbox = pod("raw")
    nodes = ["/dev/nvidia1", *cap_nodes(1, gi, ci)]
    made = container("main", env=["PATH=/usr/bin:/bin"], devices=nodes)
    made.pod_sandbox_id = sandbox.id
    result = await runtime.create_container(sandbox, made)
    assert container_view(overlay, list(result.container.env)) == [[0, uuids[1], [uuid]]]


@pytest.mark.parametrize(
    ("name", "devices"),
    [
        (f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-7", ["/dev/nvidia7"]),
        (f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-0-mig-1g10gb-19-0", ["/dev/nvidia0"]),
        (f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-1-mig-1g10gb-19-0", ["/dev/nvidia1"]),
        (f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-one", []),
        (f"{dra.CD_CLAIM_KIND}={CLAIM}-channel-x", []),
    ],
    ids=[
        "minor-past-the-gpus",
        "mig-of-a-gpu-without-mig",
        "mig-without-caps",
        "gpu-bad",
        "cd-bad",
    ],
)
async def test_a_claim_naming_nothing_of_the_node_fails_the_creation(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path, name: str, devices: list[str]
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("bad")
    with pytest.raises(PluginError) as failed:
        await runtime.create_container(sandbox, given("main", sandbox, [name], devices))
    assert f"unresolvable CDI devices {name}" in str(failed.value)
    assert await plugin.metric("nvml_mock_nri_unknown_devices_refused_total") == 1


async def test_unknown_claims_are_let_through_with_allow(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--unknown-visible-devices", "allow")
    sandbox = pod("bad")
    name = f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-7"
    result = await runtime.create_container(sandbox, given("main", sandbox, [name], []))
    assert result.container.id


def test_names_of_other_vendors_are_not_dra_claims() -> None:
    made = container(cdi=["nvidia.com/gpu=0", "vendor.example/dev=x", f"{dra.GPU_CLAIM_KIND}"])
    assert (dra.select(made).claims, dra.select(made).unresolved) == ((), ())
    annotated = container()
    annotated.annotations["cdi.k8s.io/claim"] = f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-vfio-0"
    read = dra.select(annotated)
    (vfio,), bad = read.claims, read.unresolved
    assert (vfio.kind, vfio.number, bad) == (dra.DraKind.VFIO, 0, ())
    assert read.visible.tokens == ()


SURFACES = {names.ANNOTATION_DRIVER_SURFACES: "true"}


async def test_the_drivers_own_plugin_keeps_void_and_sees_every_gpu(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """NVIDIA's DRA chart keeps ``NVIDIA_VISIBLE_DEVICES=void`` in its GPU kubelet plugin
    (so the toolkit leaves it alone); given the driver surfaces, it must see the node's GPUs
    through the library, as through real NVML, or it exits with none."""
    await start_plugin("--overlay-host-path", str(overlay))
    uuids = host_view(overlay)["uuids"]
    sandbox = pod("gpu-kubelet-plugin", annotations=SURFACES)
    made = container("plugin", env=["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"])
    made.pod_sandbox_id = sandbox.id
    result = await runtime.create_container(sandbox, made)
    env = list(result.container.env)
    assert "NVIDIA_VISIBLE_DEVICES=void" in env, "the toolkit's value is left as it was"
    assert f"{names.ENV_MOCK_NVML_VISIBLE_DEVICES}=all" in env
    view = container_view(overlay, env)
    assert isinstance(view, list)
    assert [gpu[1] for gpu in view] == uuids


async def test_void_without_the_driver_surfaces_still_shows_no_gpu(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("plain")
    made = container("main", env=["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"])
    made.pod_sandbox_id = sandbox.id
    result = await runtime.create_container(sandbox, made)
    env = list(result.container.env)
    assert not any(e.startswith(names.ENV_MOCK_NVML_VISIBLE_DEVICES) for e in env)
    assert container_view(overlay, env) == {"init": 28}


async def test_a_claim_given_the_surfaces_sees_only_its_gpu(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    """The claim's GPU replaces ``void``, so the twin is not set."""
    await start_plugin("--overlay-host-path", str(overlay))
    uuids = host_view(overlay)["uuids"]
    assert isinstance(uuids, list)
    sandbox = pod("train", annotations=SURFACES)
    made = given("main", sandbox, [f"{dra.GPU_CLAIM_KIND}={CLAIM}-gpu-2"], ["/dev/nvidia2"])
    result = await runtime.create_container(sandbox, made)
    env = list(result.container.env)
    assert not any(e.startswith(names.ENV_MOCK_NVML_VISIBLE_DEVICES) for e in env)
    assert container_view(overlay, env) == [[0, uuids[2], []]]
