"""What a container was given (:mod:`nvml_mock_nri.selection`): NVIDIA_VISIBLE_DEVICES from
its CDI GPU names and GPU device nodes, end to end through the runtime test double over a
real unix socket, and :func:`select` (the one value the adjustment, the refusals and the
allocation records read) on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import pytest
from conftest import Start, container, pod
from nvml_mock_nri.devices import DeviceScan
from nvml_mock_nri.plugin import Injector
from nvml_mock_nri.selection import (
    AMBIENT,
    EMPTY,
    Visibility,
    VisibleSelection,
    VisibleSource,
    is_mig_entry,
    parse_visible_devices,
    select,
)
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol.hostgpu import HostDriver
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import RuntimeDouble

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
UUID_2 = "GPU-01000100-1111-2222-3333-000000000002"
MIG_UUID = "MIG-4f1c0000-1111-2222-3333-000000000000"


def with_annotations(created: api.Container, annotations: dict[str, str]) -> api.Container:
    for key, value in annotations.items():
        created.annotations[key] = value
    return created


def adjusted_keys(result_adjustment: api.ContainerAdjustment) -> list[str]:
    return [kv.key for kv in result_adjustment.env]


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        (container(cdi=["nvidia.com/gpu=0", f"nvidia.com/gpu={UUID_2}"]), f"0,{UUID_2}"),
        (container(cdi=["nvidia.com/gpu=all"]), "all"),
        (container(cdi=["nvidia.com/gpu=1", "nvidia.com/gpu=1"]), "1"),
        (
            with_annotations(
                container(),
                {"cdi.k8s.io/nvidia-device-plugin_a": "nvidia.com/gpu=1,nvidia.com/gpu=3"},
            ),
            "1,3",
        ),
        (
            container(
                devices=["/dev/nvidiactl", "/dev/nvidia2", "/dev/nvidia-uvm", "/dev/nvidia0"]
            ),
            "2,0",
        ),
        (
            container(
                env=["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=void"], cdi=["nvidia.com/gpu=3"]
            ),
            "3",
        ),
        (
            container(
                env=["NVIDIA_VISIBLE_DEVICES=void"],
                cdi=[f"nvidia.com/gpu={MIG_UUID}", "nvidia.com/gpu=1:0"],
            ),
            f"{MIG_UUID},1:0",
        ),
        (
            with_annotations(
                container(),
                {"cdi.k8s.io/nvidia-dra-driver-gpu_a": "nvidia.com/gpu=0:1,nvidia.com/gpu=2"},
            ),
            "0:1,2",
        ),
    ],
    ids=[
        "cdi-index-and-uuid",
        "cdi-all",
        "cdi-duplicate",
        "cdi-annotation",
        "device-nodes",
        "toolkit-void-marker",
        "cdi-mig-uuid-and-index",
        "cdi-mig-annotation",
    ],
)
async def test_allocated_gpus_become_nvidia_visible_devices(
    runtime: RuntimeDouble, start_plugin: Start, created: api.Container, expected: str
) -> None:
    await start_plugin()
    result = await runtime.create_container(pod(), created)
    assert result.env()[VISIBLE] == expected
    assert VISIBLE in adjusted_keys(result.adjustment)


@pytest.mark.parametrize(
    "created",
    [
        container(),
        container(cdi=["nvml-mock.nvidia.com/gpu=all", "nvidia.com/imex-channel=0"]),
        container(devices=["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"]),
        with_annotations(container(), {"cdi.k8s.io/other": "vendor.example/gpu=0"}),
    ],
    ids=["nothing", "other-cdi-kinds", "control-nodes-only", "other-annotation"],
)
async def test_no_allocation_keeps_the_ambient_view(
    runtime: RuntimeDouble, start_plugin: Start, created: api.Container
) -> None:
    await start_plugin()
    result = await runtime.create_container(pod(), created)
    assert VISIBLE not in result.env()
    assert VISIBLE not in adjusted_keys(result.adjustment)
    allocated = await runtime.create_container(pod(), container(cdi=["nvidia.com/gpu=1"]))
    assert allocated.env()[VISIBLE] == "1"  # while an allocated one beside it gets its GPUs


@pytest.mark.parametrize("own", ["1", "none", "all", "", "void"])
async def test_a_value_the_pod_set_is_never_overwritten(
    runtime: RuntimeDouble, start_plugin: Start, own: str
) -> None:
    await start_plugin()
    created = container(
        env=["PATH=/usr/bin", f"NVIDIA_VISIBLE_DEVICES={own}"], devices=["/dev/nvidia0"]
    )
    result = await runtime.create_container(pod(), created)
    assert result.env()[VISIBLE] == own
    assert VISIBLE not in adjusted_keys(result.adjustment)
    unset = await runtime.create_container(pod(), container(devices=["/dev/nvidia0"]))
    assert unset.env()[VISIBLE] == "0"  # the same devices without a value of its own


async def test_a_skipped_container_gets_no_visible_devices(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    result = await runtime.create_container(
        pod(annotations={"nvml-mock.nvidia.com/inject": "false"}),
        container(cdi=["nvidia.com/gpu=0"]),
    )
    assert VISIBLE not in result.env()
    injected = await runtime.create_container(pod(), container(cdi=["nvidia.com/gpu=0"]))
    assert injected.env()[VISIBLE] == "0"


@pytest.mark.parametrize(
    ("value", "selection"),
    [
        ("", VisibleSelection(Visibility.NONE, (), VisibleSource.ENV)),
        ("void", VisibleSelection(Visibility.NONE, (), VisibleSource.ENV)),
        ("none", VisibleSelection(Visibility.NONE, (), VisibleSource.ENV)),
        (" , ,", VisibleSelection(Visibility.NONE, (), VisibleSource.ENV)),
        ("all", VisibleSelection(Visibility.ALL, (), VisibleSource.ENV)),
        ("0,ALL", VisibleSelection(Visibility.ALL, (), VisibleSource.ENV)),
        ("2, 0,,2", VisibleSelection(Visibility.LIST, ("2", "0"), VisibleSource.ENV)),
        (UUID_2, VisibleSelection(Visibility.LIST, (UUID_2,), VisibleSource.ENV)),
    ],
)
def test_value_forms(value: str, selection: VisibleSelection) -> None:
    assert parse_visible_devices(value) == selection


def test_selection_says_where_it_came_from() -> None:
    assert select(container()).visible is AMBIENT
    assert not AMBIENT.allocated
    by_env = select(container(env=["NVIDIA_VISIBLE_DEVICES=none"])).visible
    assert (by_env.kind, by_env.allocated, by_env.env_value()) == (Visibility.NONE, True, "none")
    by_cdi = select(container(cdi=["nvidia.com/gpu=0"], devices=["/dev/nvidia5"])).visible
    assert (by_cdi.source, by_cdi.tokens) == (VisibleSource.CDI, ("0",))
    by_nodes = select(container(devices=["/dev/nvidia07"])).visible
    assert (by_nodes.source, by_nodes.tokens) == (VisibleSource.DEVICE_NODES, ("7",))


@pytest.mark.parametrize(
    ("token", "mig"),
    [
        ("MIG-4f1c0000-1111-2222-3333-000000000000", True),
        ("mig-4f1c0000", True),
        ("1:0", True),
        (" 12:3 ", True),
        ("0000:40:00.0", False),  # a bus id
        ("40:00.0", False),
        ("1:", False),
        (":0", False),
        ("a:1", False),
        ("3", False),
        (UUID_2, False),
    ],
)
def test_mig_entries_are_told_from_gpus(token: str, mig: bool) -> None:
    assert is_mig_entry(token) is mig


@pytest.mark.parametrize(
    ("env", "devices", "cdi", "annotations"),
    [
        ([], [], [], {}),
        (["PATH=/bin", "HOME=/root"], ["/dev/fuse", "/dev/null"], ["vendor.com/x=1"], {}),
        (["NVIDIA_VISIBLE_DEVICES=0"], [], [], {}),
        (["NVIDIA_VISIBLE_DEVICES=void"], [], [], {}),
        ([], ["/dev/nvidia3"], [], {}),
        ([], ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"], [], {}),
        ([], [], ["nvidia.com/gpu=1"], {}),
        ([], [], ["k8s.gpu.nvidia.com/claim=0f0e-gpu-2"], {}),
        ([], [], [], {"cdi.k8s.io/x": "nvidia.com/gpu=all"}),
        ([], [], [], {"io.kubernetes.cri.sandbox-id": "abc"}),
    ],
)
def test_a_container_given_nothing_is_read_as_empty_at_once(
    env: list[str], devices: list[str], cdi: list[str], annotations: dict[str, str]
) -> None:
    made = api.Container(env=env, CDI_devices=[api.CDIDevice(name=n) for n in cdi])
    for path in devices:
        made.linux.devices.add(path=path, type="c", major=195, minor=0)
    for key, value in annotations.items():
        made.annotations[key] = value
    selection = select(made)
    if selection is EMPTY:
        assert not selection.visible.allocated and not selection.may_hold
    else:
        assert env or devices or cdi or any(k.startswith("cdi.k8s.io/") for k in annotations)


ORCHESTRATOR = {
    Injector.answer_create.__code__,
    Injector._answer.__code__,
    Injector._create_container.__code__,
}
"""The plugin's CreateContainer steps; what they call is the order the module docstring of
:mod:`nvml_mock_nri.selection` documents."""
BOOKKEEPING = {"nvml_mock_nri.health", "nvml_mock_nri.metrics"}
"""The probes' in-flight table and the counters, kept around every call."""
CLAIM = "k8s.gpu.nvidia.com/claim=0c6f5f2e-3f7d-4d2a-9b1e-5a0c1d2e3f40-gpu-2"


def traced(
    injector: Injector, sandbox: api.PodSandbox, made: api.Container
) -> tuple[list[str], dict[str, int]]:
    """Answer CreateContainer under a profiler: the package modules the plugin's steps call,
    in order, how often each package module was entered from another (nested calls
    included), and (as ``select``) how often the container was read."""
    steps: list[str] = []
    entries: dict[str, int] = {}

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        caller = frame.f_back
        if not module.startswith("nvml_mock_nri.") or caller is None:
            return
        if caller.f_globals.get("__name__") != module:
            entries[module] = entries.get(module, 0) + 1
        if frame.f_code is select.__code__:
            entries["select"] = entries.get("select", 0) + 1
        if (
            caller.f_code in ORCHESTRATOR
            and module not in BOOKKEEPING
            and module != "nvml_mock_nri.plugin"
        ):
            steps.append(module.rsplit(".", 1)[1])

    sys.setprofile(profile)
    try:
        injector.answer_create(sandbox, made)
    finally:
        sys.setprofile(None)
    return steps, entries


@pytest.mark.parametrize(
    ("annotations", "env", "devices", "cdi", "expected"),
    [
        # a DRA claim, every opt-in: the full path
        (
            {
                "nvml-mock.nvidia.com/devices": "true",
                "nvml-mock.nvidia.com/imex-channels": "true",
                "nvml-mock.nvidia.com/driver-surfaces": "true",
            },
            ["NVIDIA_VISIBLE_DEVICES=void"],
            ["/dev/nvidiactl", "/dev/nvidia2"],
            [CLAIM],
            ["replies", "selection", "adjust", "unknown_devices", "surfaces", "cuda_runtime"],
        ),
        # its own NVIDIA_VISIBLE_DEVICES: a kept answer's key, not found, then the full path
        (
            {},
            ["NVIDIA_VISIBLE_DEVICES=0"],
            [],
            [],
            ["replies", "selection", "adjust", "unknown_devices", "surfaces", "cuda_runtime"],
        ),
        # MIG capability nodes and a device plugin's CDI name
        (
            {},
            [],
            ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"],
            ["nvidia.com/gpu=1"],
            ["replies", "selection", "adjust", "unknown_devices", "surfaces", "cuda_runtime"],
        ),
    ],
)
def test_create_container_visits_each_module_once(
    annotations: dict[str, str],
    env: list[str],
    devices: list[str],
    cdi: list[str],
    expected: list[str],
    short_tmp: Path,
) -> None:
    settings = load_settings(
        [
            "--health-addr",
            "",
            "--device-namespaces",
            "default",
            "--overlay-host-path",
            str(short_tmp / "none"),
        ],
        {},
    )
    injector = Injector(
        settings,
        host_driver=HostDriver,
        scan=lambda _: DeviceScan(),
        scan_channels=lambda _: DeviceScan(),
        cdi_spec_exists=lambda _: False,
    )
    made = container(env=["PATH=/usr/bin:/bin", *env], devices=devices, cdi=cdi)
    steps, entries = traced(injector, pod(annotations=annotations), made)
    assert steps == expected
    assert len(steps) == len(set(steps))
    # what the container was given is read once; later steps read the value it made
    assert entries["select"] == 1
    assert not any(m.endswith((".visible", ".dra")) for m in entries)
