"""A pod without the claim changes nothing for a claimed GPU or MIG device.

Victims are given GPU 2 and a MIG device of GPU 1 as NVIDIA's DRA driver gives them (its CDI
names, the device nodes, ``NVIDIA_VISIBLE_DEVICES=void``). Attackers are other pods, as a
tenant would write them: their own ``NVIDIA_VISIBLE_DEVICES`` naming the victims' GPU or MIG
UUID, ``cdi.k8s.io/*`` annotations naming the victims' claims without their device nodes,
the device opt-in in an allowed namespace (every mock node) plus such an annotation, each with
the largest ``gpu-memory`` and ``gpu-utilization`` they can ask for. Everything goes through
the plugin's real code path (the runtime test double over a real unix socket, a real staged
overlay) and is read back through the real library with nvidia-ml-py in a child process, as
a node-level monitor or the exporter reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import Start, container, pod, run_container, settled
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.mig_layout import parse_spec
from nvml_mock_live import Allocation, LiveLayer
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri.allocations import RECORDS_PER_POD
from nvml_mock_nri.selection import GPU_CLAIM_KIND
from nvml_mock_protocol import names
from nvml_mock_protocol.mig_caps import MigCap, minor_of
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import PluginError
from nvml_mock_protocol.nri.runtime import RuntimeDouble

pytest.importorskip("pynvml")

GiB = 1 << 30
CLAIM = "0c6f5f2e-3f7d-4d2a-9b1e-5a0c1d2e3f40"
MIG_CLAIM = "5b2e8c1a-7d3f-4e9a-a1b2-c3d4e5f60718"
LAYOUT = [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]
GREEDY = {names.ANNOTATION_GPU_MEMORY: "80Gi", names.ANNOTATION_GPU_UTILIZATION: "busy"}


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    """A staged four-GPU H100 overlay whose GPU 1 holds two 1g.10gb and one 3g.40gb."""
    root = short_tmp / "overlay"
    config = resolve_config(profile="h100", node="node-a", count=4)
    plan = parse_spec(LAYOUT, config.profile.mig, config.count)
    stage(root, config, StageOptions(runtime=False, devices=False, imex_channels=0, mig=plan))
    return root


VIEW = textwrap.dedent(
    """
    import json, sys, pynvml as n

    def util(h):
        try:
            return n.nvmlDeviceGetUtilizationRates(h).gpu
        except n.NVMLError_NotSupported:  # a GPU in MIG mode, as on a real node
            return None

    n.nvmlInit()
    out = {}
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        gpu = {
            "used": mem.used,
            "util": util(h),
            "procs": sorted(
                [p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
                for p in n.nvmlDeviceGetComputeRunningProcesses(h)
            ),
            "mig": [],
        }
        if i == 1:
            for k in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                except n.NVMLError:
                    break
                gpu["mig"].append([
                    n.nvmlDeviceGetUUID(m),
                    n.nvmlDeviceGetGpuInstanceId(m),
                    n.nvmlDeviceGetComputeInstanceId(m),
                    n.nvmlDeviceGetMemoryInfo(m).used,
                ])
        out[str(i)] = gpu
    print(json.dumps(out))
    """
)


def nvml(overlay: Path) -> dict[str, dict[str, object]]:
    """Every GPU's used memory, utilization and compute processes, and GPU 1's MIG devices,
    through nvidia-ml-py on the overlay's library (a node-level monitor's view)."""
    lib_dir = overlay / names.OVERLAY_LIB_DIR
    state = overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME
    done = subprocess.run(
        [sys.executable, "-c", VIEW],
        check=True,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": str(lib_dir),
            names.ENV_MOCK_NVML_CONFIG: str(state),
        },
    )
    view: dict[str, dict[str, object]] = json.loads(done.stdout)
    return view


def records(overlay: Path) -> list[Allocation]:
    config = overlay / names.OVERLAY_CONFIG_DIR
    library = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
    with LiveLayer.open(config / names.LIVE_FILE_NAME, library=library, writable=False) as live:
        return live.list()


def cap_nodes(gpu: int, gi: int, ci: int) -> list[str]:
    return [
        f"/dev/nvidia-caps/nvidia-cap{minor_of(MigCap(gpu, gi))}",
        f"/dev/nvidia-caps/nvidia-cap{minor_of(MigCap(gpu, gi, ci))}",
    ]


def of(
    sandbox: api.PodSandbox,
    name: str,
    *,
    env: str | None = None,
    cdi: list[str] | None = None,
    devices: list[str] | None = None,
    annotation: str | None = None,
) -> api.Container:
    """A container of *sandbox* as the runtime hands it over."""
    made = container(
        name,
        env=["PATH=/usr/bin:/bin", *([f"NVIDIA_VISIBLE_DEVICES={env}"] if env else [])],
        devices=devices,
        cdi=cdi,
    )
    made.pod_sandbox_id = sandbox.id
    if annotation is not None:
        made.annotations["cdi.k8s.io/claim"] = annotation
    return made


def victim_part(view: dict[str, dict[str, object]], mig_uuid: str) -> object:
    """What the victims' devices show: GPU 2 whole, GPU 1's processes and the victim's MIG
    device."""
    mig = [m for m in view["1"]["mig"] if m[0] == mig_uuid]  # type: ignore[attr-defined]
    return view["2"], view["1"]["procs"], view["1"]["util"], view["1"]["used"], mig


async def test_pods_without_the_claim_change_nothing_on_claimed_gpus(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    before = nvml(overlay)
    mig_uuid, gi, ci, _ = before["1"]["mig"][2]  # type: ignore[index]
    gpu_claim = f"{GPU_CLAIM_KIND}={CLAIM}-gpu-2"
    mig_claim = f"{GPU_CLAIM_KIND}={MIG_CLAIM}-gpu-1-mig-3g40gb-9-4"

    # attackers that come first declare GPU 2 (and 3) while no one holds them
    early = pod("early", namespace="tenant", annotations=GREEDY)
    await run_container(runtime, early, of(early, "main", env="2"), 9000)
    await run_container(runtime, early, of(early, "wide", env="3,2"), 9001)
    assert sorted(r.gpus for r in records(overlay)) == [(2,), (2, 3)]

    # the victims, given GPU 2 and the 3g.40gb of GPU 1 by the DRA driver
    train = pod("train", annotations={names.ANNOTATION_GPU_MEMORY: "20Gi"})
    await run_container(
        runtime,
        train,
        of(train, "main", env="void", cdi=[gpu_claim], devices=["/dev/nvidiactl", "/dev/nvidia2"]),
        4100,
    )
    infer = pod("infer", annotations={names.ANNOTATION_GPU_UTILIZATION: "steady 30"})
    await run_container(
        runtime,
        infer,
        of(
            infer,
            "main",
            env="void",
            cdi=[mig_claim],
            devices=["/dev/nvidiactl", "/dev/nvidia1", *cap_nodes(1, gi, ci)],
        ),
        4200,
    )
    # the early declarations lost GPU 2 the moment the claim was recorded: one went, the
    # other keeps GPU 3 only
    held = {r.pid: (r.gpus, r.mig) for r in records(overlay)}
    assert held == {9001: ((3,), ()), 4100: ((2,), ()), 4200: ((1,), ((1, gi, ci),))}
    victims = nvml(overlay)
    assert [p[:2] for p in victims["2"]["procs"]] == [[4100, 20 * GiB]]  # type: ignore[union-attr]
    assert victims["2"]["used"] == before["2"]["used"] + 20 * GiB  # type: ignore[operator]
    assert [p[0] for p in victims["1"]["procs"]] == [4200]  # type: ignore[union-attr]

    # every way a tenant pod names what it was not given
    tenant = pod("attacker", namespace="tenant", annotations=GREEDY)
    attacks = [
        of(tenant, "env-gpu", env="2"),
        of(tenant, "env-mig", env=mig_uuid),
        of(tenant, "env-all", env="all"),
        of(tenant, "env-index", env="1:2"),
        of(tenant, "claim", annotation=gpu_claim),
        of(tenant, "mig-claim", annotation=mig_claim),
        of(tenant, "claim-void", env="void", annotation=f"{gpu_claim},{mig_claim}"),
        of(tenant, "cdi-name", annotation="nvidia.com/gpu=2,nvidia.com/gpu=all"),
        # another GPU's node does not make a claim of GPU 2 or GPU 1's MIG device
        of(tenant, "wrong-node", annotation=gpu_claim, devices=["/dev/nvidia0"]),
        of(tenant, "wrong-caps", annotation=mig_claim, devices=["/dev/nvidia0"]),
    ]
    # a pod of an allowed namespace with the device opt-in holds every mock node
    opted = pod(
        "opted",
        annotations={
            **GREEDY,
            "nvml-mock.nvidia.com/devices": "true",
        },
    )
    every_node = [f"/dev/nvidia{i}" for i in range(4)] + cap_nodes(1, gi, ci)
    attacks_opted = [
        of(opted, "opted-claim", annotation=f"{gpu_claim},{mig_claim}", devices=every_node),
        of(opted, "opted-env", env=f"2,{mig_uuid}", devices=every_node),
    ]
    pid = 9100
    refused: list[str] = []
    for sandbox, made in [*((tenant, a) for a in attacks), *((opted, a) for a in attacks_opted)]:
        pid += 1
        try:
            await run_container(runtime, sandbox, made, pid)
        except PluginError as exc:  # a claim naming nothing it can open fails its creation
            assert "unresolvable CDI devices" in str(exc)
            refused.append(made.name)
    assert refused == ["mig-claim", "claim-void", "wrong-caps"]
    after = nvml(overlay)
    assert victim_part(after, str(mig_uuid)) == victim_part(victims, str(mig_uuid))
    # no record but the victims' holds GPU 2 or GPU 1 (what the exporter labels with pods)
    for record in records(overlay):
        if record.pid not in (4100, 4200):  # the victims
            assert not {1, 2} & set(record.gpus), record
    assert await plugin.metric("nvml_mock_nri_allocations_limited_total") >= 1

    # and the same after a plugin restart: Synchronize rebuilds the records, claims first
    plugin.service.stop()
    await plugin.exit_code()
    await start_plugin("--overlay-host-path", str(overlay))
    assert victim_part(nvml(overlay), str(mig_uuid)) == victim_part(victims, str(mig_uuid))


async def test_one_pod_adds_at_most_its_record_limit(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    many = pod("many", namespace="tenant", annotations=GREEDY)
    for i in range(RECORDS_PER_POD + 8):
        await run_container(runtime, many, of(many, f"c{i}", env="3"), 7000 + i)
    assert len(records(overlay)) == RECORDS_PER_POD
    procs = nvml(overlay)["3"]["procs"]
    assert isinstance(procs, list) and len(procs) == RECORDS_PER_POD
    assert await plugin.metric("nvml_mock_nri_allocations_limited_total") == 8
    # a container that stops makes room for the next one
    first = next(c for c in runtime.containers.values() if c.pid == 7000)
    await runtime.stop_container(many, first)
    await settled(runtime, many)
    await run_container(runtime, many, of(many, "late", env="3"), 7999)
    assert 7999 in {r.pid for r in records(overlay)}
    assert len(records(overlay)) == RECORDS_PER_POD
