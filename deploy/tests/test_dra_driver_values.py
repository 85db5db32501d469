"""The values that deploy NVIDIA's DRA driver beside the mock agree with the mock's chart,
and (with NVIDIA's chart at hand) render into kubelet plugins that read the mock's driver
root and proc-devices substitute with the feature gates they name.

NVIDIA's chart is not part of this repository and no test fetches it: set
``NVML_MOCK_DRA_DRIVER_CHART`` to a checkout's ``deployments/helm/dra-driver-nvidia-gpu``
to render it too (the test says so when it skips).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from conftest import RenderFn
from manifests import container, env_of
from nvml_mock_protocol import names

ROOT = Path(__file__).resolve().parents[1]
DRA_VALUES = ROOT / "dra-driver" / "dra-driver-values.yaml"
MOCK_VALUES = ROOT / "dra-driver" / "nvml-mock-values.yaml"
DRA_ACT = ROOT.parent / "demo" / "kind" / "dra_act.sh"
EXCLUSIVE = {"NVMLDeviceHealthCheck": ("DynamicMIG", "PassthroughSupport")}
"""Gates the DRA driver refuses together (its featuregates validation)."""


def _values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(DRA_VALUES.read_text())
    return loaded


def test_the_driver_root_and_proc_devices_are_the_mocks(chart: helm.Chart) -> None:
    values = _values()
    host_path = chart.values["nri"]["overlay"]["hostPath"]
    assert values["nvidiaDriverRoot"] == host_path
    assert values["altProcDevices"] == f"{host_path}/proc/devices"


def test_the_kubelet_plugins_stay_on_staged_nodes(render: RenderFn) -> None:
    terms = _values()["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (term,) = terms
    (expression,) = term["matchExpressions"]
    assert (expression["key"], expression["operator"], expression["values"]) == (
        "nvml-mock.nvidia.com/staged",
        "In",
        ["true"],
    )
    # the label the mock's stager puts on the nodes it staged
    stage_env = env_of(container(render().get("DaemonSet", "nvml-mock"), "stage"))
    assert "nvml-mock.nvidia.com/staged=true" in stage_env["NVML_MOCK_NODE_LABELS"].split(",")


def test_feature_gates_are_ones_the_driver_accepts_together() -> None:
    gates = _values()["featureGates"]
    assert gates["NVMLDeviceHealthCheck"] is True
    for gate, others in EXCLUSIVE.items():
        if gates.get(gate):
            assert not any(gates.get(o) for o in others), f"{gate} excludes {others}"


def test_the_mock_chart_stages_the_channels_the_claims_get(render: RenderFn) -> None:
    rendered = render(yaml_text=MOCK_VALUES.read_text())
    env = env_of(container(rendered.get("DaemonSet", "nvml-mock"), "stage"))
    assert env["NVML_MOCK_IMEX_CHANNELS"] == "8"


def test_the_kubelet_plugins_opt_in_to_the_driver_surfaces(render: RenderFn) -> None:
    """On a real node the GPU plugin's slices had no pcieRoot: it reads the PCI functions
    at /sys/bus/pci, which the NRI plugin binds only for pods that opt in, in a namespace
    the mock's chart allows."""
    annotations = _values()["kubeletPlugin"]["podAnnotations"]
    assert annotations == {names.ANNOTATION_DRIVER_SURFACES: "true"}
    rendered = render(yaml_text=MOCK_VALUES.read_text())
    env = env_of(container(rendered.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    allowed = env["NVML_MOCK_DEVICE_NAMESPACES"].split(",")
    dra_namespace = "nvidia-dra-driver-gpu"  # the demo's DRA_NAMESPACE and the README's
    assert dra_namespace in allowed
    assert f"DRA_NAMESPACE:-{dra_namespace}" in DRA_ACT.read_text()


def test_nvidias_chart_renders_onto_the_mock() -> None:
    chart_dir = os.environ.get("NVML_MOCK_DRA_DRIVER_CHART", "")
    if not chart_dir:
        pytest.skip("NVIDIA's DRA driver chart not given (NVML_MOCK_DRA_DRIVER_CHART)")
    with helm.Chart.load(Path(chart_dir)) as nvidia:
        files = nvidia.render(
            _values(),
            name="nvidia-dra-driver-gpu",
            namespace="nvidia-dra-driver-gpu",
            is_install=True,
        )
    docs = [d for text in files.values() if text.strip() for d in yaml.safe_load_all(text) if d]
    (plugin,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = plugin["spec"]["template"]["spec"]
    roots = [
        v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/var/lib/nvml-mock"
    ]
    assert roots, "the driver root is mounted"
    alt = [
        v
        for v in spec["volumes"]
        if v.get("hostPath", {}).get("path") == "/var/lib/nvml-mock/proc/devices"
    ]
    assert alt, "the proc-devices substitute is mounted"
    envs = {
        c["name"]: {e["name"]: e.get("value") for e in c.get("env", [])} for c in spec["containers"]
    }
    assert any(env.get("ALT_PROC_DEVICES_PATH") for env in envs.values())
    gates = " ".join(str(env.get("FEATURE_GATES", "")) for env in envs.values())
    assert "NVMLDeviceHealthCheck=true" in gates
    annotations = plugin["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get(names.ANNOTATION_DRIVER_SURFACES) == "true"
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == (
        "nvml-mock.nvidia.com/staged"
    )
