"""A GPU in MIG mode: one set of series per GPU instance, with GPU_I_PROFILE and GPU_I_ID."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

from conftest import Exporter, Node, get, parse

MAKE_INSTANCES = textwrap.dedent(
    """
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    for _ in range(2):
        gi = pynvml.nvmlDeviceCreateGpuInstance(h, info.id)
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci.id)
        print(pynvml.nvmlGpuInstanceGetInfo(gi).id)
    """
)


def test_gpu_instances_get_their_own_series(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    made = subprocess.run(
        [sys.executable, "-c", MAKE_INSTANCES],
        env=node.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    ids = sorted(made.stdout.split())
    exporter = run_exporter()
    exposition = parse(exporter.wait_for(lambda t: "GPU_I_ID" in t and "FB_USED" in t))
    on_mig = exposition.of("DCGM_FI_DEV_FB_FREE", gpu="0")
    assert sorted(s.labels["GPU_I_ID"] for s in on_mig) == ids
    assert {s.labels["GPU_I_PROFILE"] for s in on_mig} == {"3g.40gb"}
    assert list(on_mig[0].labels)[:8] == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "hostname",
    ]
    # an instance's memory is its own, well under the whole GPU's
    whole = exposition.of("DCGM_FI_DEV_FB_FREE", gpu="1")[0].value
    assert 0 < on_mig[0].value < whole / 2
    # no whole-GPU utilization in MIG mode, as on a real GPU; the other GPUs keep theirs
    assert not exposition.of("DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert exposition.of("DCGM_FI_DEV_GPU_UTIL", gpu="1")
    assert not exposition.of("DCGM_FI_DEV_GPU_TEMP", gpu="1")[0].labels.get("GPU_I_ID")


MIG_MODE_ONLY = textwrap.dedent(
    """
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    print(pynvml.nvmlDeviceGetMigMode(h)[0])
    """
)


def test_a_gpu_in_mig_mode_without_instances_keeps_its_series_xids_and_health(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    made = subprocess.run(
        [sys.executable, "-c", MIG_MODE_ONLY],
        env=node.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert made.stdout.split() == ["1"]
    exporter = run_exporter()
    exposition = parse(exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="7"' in t))
    temp = exposition.of("DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert len(temp) == 1 and "GPU_I_ID" not in temp[0].labels
    assert exposition.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="0", health_watch="ALL")[0].value == 0
    node.ctl("fail", "ecc-uncorrectable", "-i", "0")
    text = exporter.wait_for(
        lambda t: (
            bool(parse(t).of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="0", health_watch="MEM"))
            and parse(t).of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="0", health_watch="MEM")[0].value
            == 20
            and parse(t).of("DCGM_FI_DEV_XID_ERRORS", gpu="0")[0].value != 0
        )
    )
    exposition = parse(text)
    assert exposition.of("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu="0")[0].value > 0
    assert exposition.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="0", health_watch="ALL")[0].value == 20
    assert {s.labels["xid"] for s in exposition.of("DCGM_EXP_XID_ERRORS_COUNT", gpu="0")} >= {"94"}
    status, why = get(exporter.url + "/health")
    assert status == 200  # the exporter itself is well: a liveness probe must not restart it
    assert "GPU 0 fails health: MEM DCGM_FR_VOLATILE_DBE_DETECTED" in why, why
