"""The pure injection rules: skip, env merge edge cases, device choice."""

from __future__ import annotations

import pytest
from nvml_mock_nri.adjust import (
    DEFAULT_PATH,
    Decision,
    DeviceRefusal,
    FabricIdentity,
    Policy,
    SkipReason,
    decide,
    merge_env,
    parse_env,
    plan_devices,
    skip_reason,
)
from nvml_mock_nri.devices import DeviceNode, DeviceScan
from nvml_mock_nri.selection import Selection, select
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol.hostgpu import HostDriver
from nvml_mock_protocol.nri import api_pb2 as api

IDENTITY = FabricIdentity("dom-a", "0b1c2d3e-0000-4000-8000-000000000001", 7)


def policy(*argv: str) -> Policy:
    return Policy.from_settings(load_settings(["--node-name", "node-1", *argv], {}))


@pytest.mark.parametrize(
    ("namespace", "annotations", "mounts", "reason"),
    [
        ("default", {"nvml-mock.nvidia.com/inject": "false"}, [], SkipReason.OPT_OUT),
        ("default", {"nvml-mock.nvidia.com/inject": " FALSE "}, [], SkipReason.OPT_OUT),
        ("kube-system", {}, [], SkipReason.EXCLUDED_NAMESPACE),
        ("nvml-mock", {}, [], SkipReason.EXCLUDED_NAMESPACE),
        ("ci", {}, [], SkipReason.EXCLUDED_NAMESPACE),
        ("default", {}, ["/etc/hosts", "/opt/nvml-mock"], SkipReason.OVERLAY_ALREADY_MOUNTED),
        ("default", {}, ["/opt/nvml-mock/"], SkipReason.OVERLAY_ALREADY_MOUNTED),
        ("default", {"nvml-mock.nvidia.com/inject": "true"}, [], None),
        ("default", {"nvml-mock.nvidia.com/inject": "no"}, [], None),
        ("kube-system-2", {}, ["/opt/nvml-mock-other", "/opt"], None),
    ],
)
def test_skip_rules(
    namespace: str, annotations: dict[str, str], mounts: list[str], reason: SkipReason | None
) -> None:
    rules = policy("--release-namespace", "nvml-mock", "--excluded-namespaces", "ci")
    assert skip_reason(rules, namespace, annotations, mounts) is reason


def test_plain_container_gets_every_variable_in_order() -> None:
    env = merge_env(policy(), ["HOME=/root", "PATH=/usr/bin:/bin"], IDENTITY)
    assert env == [
        ("PATH", "/opt/nvml-mock/bin:/usr/bin:/bin"),
        ("LD_LIBRARY_PATH", "/opt/nvml-mock/lib"),
        ("MOCK_NVML_CONFIG", "/opt/nvml-mock/config/state.nvmlmock"),
        ("NODE_NAME", "node-1"),
        ("MOCK_FABRIC_CLUSTER_UUID", "0b1c2d3e-0000-4000-8000-000000000001"),
        ("MOCK_FABRIC_CLIQUE_ID", "7"),
        ("MOCK_FABRIC_DOMAIN", "dom-a"),
    ]


def test_changed_keys_follow_the_containers_order() -> None:
    env = merge_env(policy(), ["LD_LIBRARY_PATH=/usr/lib/x", "A=1", "PATH=/bin"], None)
    assert [key for key, _ in env][:2] == ["LD_LIBRARY_PATH", "PATH"]


def test_absent_path_gets_the_standard_search_path_after_the_overlay() -> None:
    env = dict(merge_env(policy(), [], None))
    assert env["PATH"] == "/opt/nvml-mock/bin:" + DEFAULT_PATH
    assert env["LD_LIBRARY_PATH"] == "/opt/nvml-mock/lib"


def test_empty_search_paths_become_the_overlay_dir_alone() -> None:
    env = dict(merge_env(policy(), ["PATH=", "LD_LIBRARY_PATH="], None))
    assert env["PATH"] == "/opt/nvml-mock/bin"
    assert env["LD_LIBRARY_PATH"] == "/opt/nvml-mock/lib"


@pytest.mark.parametrize(
    "path",
    ["/opt/nvml-mock/bin:/usr/bin", "/usr/bin:/opt/nvml-mock/bin", "/usr/bin:/opt/nvml-mock/bin/"],
)
def test_search_path_already_holding_the_overlay_is_not_emitted(path: str) -> None:
    env = dict(merge_env(policy(), [f"PATH={path}", "LD_LIBRARY_PATH=/opt/nvml-mock/lib"], None))
    assert "PATH" not in env
    assert "LD_LIBRARY_PATH" not in env


def test_values_the_pod_set_are_never_overwritten() -> None:
    existing = ["MOCK_NVML_CONFIG=/my/state", "NODE_NAME=", "MOCK_FABRIC_CLIQUE_ID=3"]
    env = dict(merge_env(policy(), existing, IDENTITY))
    assert set(env) == {"PATH", "LD_LIBRARY_PATH"}


def test_no_node_name_no_identity_means_no_such_variables() -> None:
    rules = Policy.from_settings(load_settings([], {}))
    env = dict(merge_env(rules, [], None))
    assert set(env) == {"PATH", "LD_LIBRARY_PATH", "MOCK_NVML_CONFIG"}


def test_parse_env_first_duplicate_wins_and_junk_is_ignored() -> None:
    assert parse_env(["A=1", "A=2", "JUNK", "=x", "B=c=d"]) == {"A": "1", "B": "c=d"}


def test_custom_mount_path_moves_every_path() -> None:
    rules = policy("--overlay-mount-path", "/mnt/mock/")
    decision = decide(
        rules,
        namespace="default",
        pod_annotations={},
        env=[],
        mount_destinations=[],
        identity=None,
    )
    assert decision.mount is not None
    assert decision.mount.destination == "/mnt/mock"
    assert decision.mount.options == ("rbind", "ro", "nosuid", "nodev")
    assert dict(decision.env)["MOCK_NVML_CONFIG"] == "/mnt/mock/config/state.nvmlmock"


@pytest.mark.parametrize(
    ("paths", "cdi", "expected"),
    [
        (["/dev/nvidia0"], [], True),
        (["/dev/nvidiactl"], [], True),
        ([], ["nvidia.com/gpu=0"], True),
        (["/dev/fuse"], ["vendor.com/x=1"], False),
        ([], ["nvml-mock.nvidia.com/gpu=all"], False),
        ([], [], False),
    ],
)
def test_gpu_device_detection(paths: list[str], cdi: list[str], expected: bool) -> None:
    assert given(tuple(paths), tuple(cdi)).nvidia_devices is expected


def given(paths: tuple[str, ...], cdi: tuple[str, ...]) -> Selection:
    """What a container with these device paths and CDI devices was given."""
    made = api.Container(CDI_devices=[api.CDIDevice(name=n) for n in cdi])
    for path in paths:
        made.linux.devices.add(path=path, type="c", major=195, minor=0)
    return select(made)


NODE = DeviceNode("/dev/nvidia0", 195, 0, 0o666, 0, 0)


NO_DRIVER = HostDriver()
REAL_DRIVER = HostDriver(("/proc/driver/nvidia/version: NVRM version: 550.54.15",))


def _plan(
    rules: Policy,
    spec: bool,
    paths: tuple[str, ...] = (),
    cdi: tuple[str, ...] = (),
    *,
    namespace: str = "demo",
    driver: HostDriver = NO_DRIVER,
) -> Decision:
    decision = Decision()
    plan_devices(
        rules,
        decision,
        namespace=namespace,
        selection=given(paths, cdi),
        host_driver=lambda: driver,
        cdi_spec_exists=lambda _: spec,
        scan=lambda _: DeviceScan([NODE]),
    )
    return decision


ALLOWED = ("--device-namespaces", "demo,ml")


@pytest.mark.parametrize("mode", ["raw", "cdi"])
def test_devices_are_refused_outside_the_allowed_namespaces(mode: str) -> None:
    rules = policy("--device-injection-mode", mode, *ALLOWED)
    decision = _plan(rules, spec=True, namespace="default")
    assert (decision.devices, decision.cdi_devices) == ([], [])
    assert decision.devices_refused is DeviceRefusal.NAMESPACE_NOT_ALLOWED
    assert "namespace 'default' is not allowed to opt in" in decision.warnings[0]
    assert _plan(rules, spec=True, namespace="ml").devices_refused is None


def test_no_namespace_may_opt_in_by_default() -> None:
    decision = _plan(policy(), spec=False, namespace="demo")
    assert decision.devices_refused is DeviceRefusal.NAMESPACE_NOT_ALLOWED
    assert decision.devices == []


@pytest.mark.parametrize("mode", ["raw", "cdi"])
def test_devices_are_refused_on_a_node_with_a_real_driver(mode: str) -> None:
    rules = policy("--device-injection-mode", mode, *ALLOWED)
    decision = _plan(rules, spec=True, driver=REAL_DRIVER)
    assert (decision.devices, decision.cdi_devices) == ([], [])
    assert decision.devices_refused is DeviceRefusal.REAL_DRIVER
    assert decision.warnings == [
        "device nodes refused: a real NVIDIA driver is loaded on this node "
        "(/proc/driver/nvidia/version: NVRM version: 550.54.15), so the mock's device numbers "
        "would open the real GPUs; the overlay and env are still injected"
    ]


def test_cdi_mode_with_spec_adds_the_cdi_reference_only() -> None:
    decision = _plan(policy("--device-injection-mode", "cdi", *ALLOWED), spec=True)
    assert decision.cdi_devices == ["nvml-mock.nvidia.com/gpu=all"]
    assert decision.devices == []


def test_cdi_mode_without_spec_falls_back_to_raw_with_a_warning() -> None:
    decision = _plan(policy("--device-injection-mode", "cdi", *ALLOWED), spec=False)
    assert decision.cdi_devices == []
    assert decision.devices == [NODE]
    assert "falling back to raw" in decision.warnings[0]


def test_devices_suppressed_when_a_device_plugin_served_the_container() -> None:
    decision = _plan(policy("--device-injection-mode", "cdi"), True, cdi=("nvidia.com/gpu=1",))
    assert (decision.devices, decision.cdi_devices) == ([], [])
    assert "already has NVIDIA devices" in decision.notes[0]
    assert decision.devices_suppressed
