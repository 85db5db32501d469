"""The chart as Helm renders it: valid Kubernetes objects wired to the names every part agrees on.

Each value set is rendered by Helm's own engine and every object is validated against the
Kubernetes OpenAPI schemas (strict: unknown fields fail) of the oldest supported version
(the chart's kubeVersion floor) and the newest known one. The wiring checks compare with
``nvml_mock_protocol.names``, the constants the plugin, library and tools also read.
"""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from conftest import CHART_DIR, DEMO_TOPOLOGY, NAMESPACE, REPO_ROOT, RenderFn
from manifests import container, env_of, mounts_of, pod_spec
from nvml_mock_protocol import names

KUBE_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())

# Kinds the chart renders only where the cluster serves them (it checks the Kubernetes
# version), so they are validated only against versions at or above their floor.
KIND_FLOORS = {
    "ValidatingAdmissionPolicy": (1, 30),
    "ValidatingAdmissionPolicyBinding": (1, 30),
}


def _served(kind: str, kube_version: str) -> bool:
    major, minor = (int(part) for part in kube_version.split(".")[:2])
    return (major, minor) >= KIND_FLOORS.get(kind, (0, 0))


VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "topology": {"topology": DEMO_TOPOLOGY},
    "topology-empty": {"topology": {"enabled": True, "domains": []}},
    "nri-off": {"nri": {"enabled": False}, "nodeLabels": {"gpuPresent": False}},
    "imex": {"imex": {"channels": {"enabled": True, "count": 2048, "major": 254}}},
    "trust-tuned": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "realGpuNodes": {"labels": ["example.com/real-gpu"]},
        "nodeLabels": {"ownNodeOnly": False},
        "nri": {"deviceNamespaces": ["gpu-tests"]},
        "topology": {
            **DEMO_TOPOLOGY,
            "networkPolicy": {
                "enabled": True,
                "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            },
        },
    },
    "everything-moved": {
        "fullnameOverride": "gpu-mock",
        "image": {"registry": "registry.example.com/team/", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "pull"}],
        "gpu": {"profile": "h100", "count": 8},
        "logFormat": "text",
        "logLevel": "debug",
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
        "nri": {
            "image": {"digest": "sha256:" + "ab" * 32},
            "socketPath": "/run/containerd/nri/nri.sock",
            "overlay": {"hostPath": "/srv/mock", "mountPath": "/usr/local/mock"},
            "deviceInjectionMode": "cdi",
            "cdiSpecDir": "/etc/cdi",
            "excludedNamespaces": ["monitoring", "kube-system"],
            "healthPort": 9440,
            "readinessProbe": None,
            "livenessProbe": None,
        },
        "topology": {
            **DEMO_TOPOLOGY,
            "port": 9000,
            "replicas": 2,
            "service": {"type": "NodePort"},
        },
    },
}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_object_is_valid_kubernetes(
    render: RenderFn, value_set: str, kube_version: str
) -> None:
    rendered = render(VALUE_SETS[value_set])
    assert rendered.objects
    for (kind, name), obj in rendered.objects.items():
        if not _served(kind, kube_version):
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind} {name} is invalid for Kubernetes {kube_version}: {exc.message}")
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "nvml-mock"


def test_helm_lint_is_clean() -> None:
    for values in ({}, {"topology": DEMO_TOPOLOGY}):
        report = helm.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE)
        serious = [m for m in report["messages"] if m["severity"] >= 2]
        assert not serious, serious
        assert not report["errors"], report["errors"]


def test_what_renders_follows_the_switches(render: RenderFn) -> None:
    default = render()
    assert default.kinds() == {
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert ("DaemonSet", "nvml-mock-nri") in default.objects
    with_topology = render({"topology": DEMO_TOPOLOGY})
    for kind in ("ConfigMap", "Deployment", "Service"):
        with_topology.get(kind, "nvml-mock-topology")
    bare = render(VALUE_SETS["nri-off"])
    assert set(bare.objects) == {
        ("DaemonSet", "nvml-mock"),
        ("ServiceAccount", "nvml-mock-staging"),
    }


def test_defaults_are_the_shared_names(chart: helm.Chart) -> None:
    values = chart.values
    nri = values["nri"]
    assert nri["socketPath"] == names.NRI_SOCKET_PATH
    assert nri["pluginName"] == names.NRI_PLUGIN_NAME
    assert nri["pluginIndex"] == names.NRI_PLUGIN_INDEX
    assert nri["overlay"] == {
        "hostPath": names.OVERLAY_HOST_PATH,
        "mountPath": names.OVERLAY_MOUNT_PATH,
        "writersLockPath": names.DEFAULT_LOCK_DIR,
    }
    assert f"{nri['cdiSpecDir']}/nvml-mock-nri.yaml" == names.CDI_SPEC_HOST_PATH
    assert nri["healthPort"] == names.NRI_PLUGIN_HEALTH_PORT
    assert values["topology"]["port"] == names.TOPOLOGY_SERVICE_PORT


def test_nri_plugin_daemonset_wiring(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    ds = rendered.get("DaemonSet", "nvml-mock-nri")
    spec = pod_spec(ds)
    plugin = container(ds, "nri-plugin")
    env = env_of(plugin)

    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NRI_SOCKET_PATH"] == names.NRI_SOCKET_PATH
    assert env["NRI_PLUGIN_NAME"] == names.NRI_PLUGIN_NAME
    assert env["NRI_PLUGIN_INDEX"] == names.NRI_PLUGIN_INDEX
    assert env["NVML_MOCK_HEALTH_ADDR"] == f":{names.NRI_PLUGIN_HEALTH_PORT}"
    assert env["NVML_MOCK_OVERLAY_HOST_PATH"] == names.OVERLAY_HOST_PATH
    assert env["NVML_MOCK_OVERLAY_MOUNT_PATH"] == names.OVERLAY_MOUNT_PATH
    assert env["NVML_MOCK_DEVICE_INJECTION_MODE"] == "raw"
    assert env["NVML_MOCK_CDI_SPEC_HOST_PATH"] == names.CDI_SPEC_HOST_PATH
    assert env["NVML_MOCK_RELEASE_NAMESPACE"] == NAMESPACE
    assert env["NVML_MOCK_LOG_FORMAT"] == "json"
    assert "NVML_MOCK_LOG_LEVEL" not in env

    # The URL names the Service the chart renders, in the release namespace, on its port.
    service = rendered.get("Service", "nvml-mock-topology")
    port = service["spec"]["ports"][0]["port"]
    assert env["NVML_MOCK_TOPOLOGY_URL"] == f"http://nvml-mock-topology.{NAMESPACE}.svc:{port}"

    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["automountServiceAccountToken"] is False
    assert not spec.get("hostNetwork", False)
    security = plugin["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "add" not in security["capabilities"]

    mounts = mounts_of(ds, plugin)
    socket_mount, socket_volume = mounts["/var/run/nri"]
    assert socket_volume["hostPath"] == {"path": "/var/run/nri", "type": "DirectoryOrCreate"}
    assert not socket_mount.get("readOnly", False)
    overlay_mount, overlay_volume = mounts[names.OVERLAY_HOST_PATH]
    assert overlay_mount["readOnly"] is True
    assert overlay_volume["hostPath"]["path"] == names.OVERLAY_HOST_PATH
    cdi_mount, cdi_volume = mounts["/var/run/cdi"]
    assert cdi_mount["readOnly"] is True
    # the CUDA socket: served in the overlay's run/ (writable), peers' PIDs the node's
    run = f"{names.OVERLAY_HOST_PATH}/{names.OVERLAY_CUDA_SOCKET.rsplit('/', 1)[0]}"
    run_mount, run_volume = mounts[run]
    assert not run_mount.get("readOnly", False)
    assert run_volume["hostPath"] == {"path": run, "type": "DirectoryOrCreate"}
    assert spec["hostPID"] is True
    assert cdi_volume["hostPath"]["path"] == "/var/run/cdi"


def test_nri_probes_hit_readyz_and_healthz_on_the_health_port(render: RenderFn) -> None:
    for port in (names.NRI_PLUGIN_HEALTH_PORT, 9440):
        ds = render({"nri": {"healthPort": port}}).get("DaemonSet", "nvml-mock-nri")
        plugin = container(ds, "nri-plugin")
        assert plugin["ports"] == [{"name": "health", "containerPort": port, "protocol": "TCP"}]
        assert env_of(plugin)["NVML_MOCK_HEALTH_ADDR"] == f":{port}"
        readiness, liveness = plugin["readinessProbe"], plugin["livenessProbe"]
        assert readiness["httpGet"] == {"path": "/readyz", "port": "health"}
        assert liveness["httpGet"] == {"path": "/healthz", "port": "health"}
        # A node that stops injecting goes NotReady after two misses; restarts need three.
        assert readiness["failureThreshold"] == 2
        assert liveness["failureThreshold"] == 3


def test_probes_can_be_tuned_or_dropped(render: RenderFn) -> None:
    tuned = render({"nri": {"readinessProbe": {"periodSeconds": 3}, "livenessProbe": None}})
    plugin = container(tuned.get("DaemonSet", "nvml-mock-nri"), "nri-plugin")
    assert plugin["readinessProbe"]["periodSeconds"] == 3
    assert plugin["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "livenessProbe" not in plugin


@pytest.mark.parametrize(
    ("release_namespace", "extra", "expected"),
    [
        ("mokka", [], "mokka,kube-system"),
        ("mokka", ["monitoring", "ci"], "mokka,kube-system,monitoring,ci"),
        ("mokka", ["kube-system", "mokka", "ci"], "mokka,kube-system,ci"),
        ("kube-system", ["ci"], "kube-system,ci"),
    ],
)
def test_excluded_namespaces_always_hold_the_release_namespace_and_kube_system(
    render: RenderFn, release_namespace: str, extra: list[str], expected: str
) -> None:
    rendered = render({"nri": {"excludedNamespaces": extra}}, namespace=release_namespace)
    env = env_of(container(rendered.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert env["NVML_MOCK_EXCLUDED_NAMESPACES"] == expected
    excluded = expected.split(",")
    assert excluded[0] == release_namespace
    assert set(names.EXCLUDED_NAMESPACES) <= set(excluded)
    assert env["NVML_MOCK_RELEASE_NAMESPACE"] == release_namespace
    assert release_namespace in rendered.notes


def test_moved_paths_follow_everywhere(render: RenderFn) -> None:
    rendered = render(VALUE_SETS["everything-moved"])
    nri = rendered.get("DaemonSet", "gpu-mock-nri")
    plugin = container(nri, "nri-plugin")
    env = env_of(plugin)
    assert env["NRI_SOCKET_PATH"] == "/run/containerd/nri/nri.sock"
    assert env["NVML_MOCK_OVERLAY_HOST_PATH"] == "/srv/mock"
    assert env["NVML_MOCK_OVERLAY_MOUNT_PATH"] == "/usr/local/mock"
    assert env["NVML_MOCK_DEVICE_INJECTION_MODE"] == "cdi"
    assert env["NVML_MOCK_CDI_SPEC_HOST_PATH"] == "/etc/cdi/nvml-mock-nri.yaml"
    assert env["NVML_MOCK_EXCLUDED_NAMESPACES"] == f"{NAMESPACE},kube-system,monitoring"
    assert env["NVML_MOCK_TOPOLOGY_URL"] == f"http://gpu-mock-topology.{NAMESPACE}.svc:9000"
    assert env["NVML_MOCK_LOG_LEVEL"] == "debug"
    assert "readinessProbe" not in plugin and "livenessProbe" not in plugin
    nri_mounts = mounts_of(nri, plugin)
    assert nri_mounts["/run/containerd/nri"][1]["hostPath"]["path"] == "/run/containerd/nri"
    assert nri_mounts["/srv/mock"][1]["hostPath"]["path"] == "/srv/mock"
    assert nri_mounts["/etc/cdi"][1]["hostPath"]["path"] == "/etc/cdi"
    assert nri_mounts["/srv/mock/.nvml-mock"][1]["hostPath"]["path"] == "/srv/mock/.nvml-mock"

    staging = rendered.get("DaemonSet", "gpu-mock")
    stage = container(staging, "stage")
    stage_env = env_of(stage)
    assert stage_env["NVML_MOCK_OVERLAY_HOST_PATH"] == "/srv/mock"
    assert stage_env["NVML_MOCK_CDI_SPEC_HOST_PATH"] == "/etc/cdi/nvml-mock-nri.yaml"
    assert stage_env["NVML_MOCK_PROFILE"] == "h100"
    assert stage_env["NVML_MOCK_GPU_COUNT"] == "8"
    assert set(mounts_of(staging, stage)) == {"/srv/mock", "/etc/cdi", "/tmp", "/run/nvml-mock"}
    # Both DaemonSets land on the same nodes: the plugin injects what the stager staged.
    for ds in (nri, staging):
        assert pod_spec(ds)["nodeSelector"] == {"pool": "gpu"}
        assert "tolerations" not in pod_spec(ds)
        assert pod_spec(ds)["imagePullSecrets"] == [{"name": "pull"}]

    topology = rendered.get("Deployment", "gpu-mock-topology")
    assert topology["spec"]["replicas"] == 2
    assert container(topology, "topology-service")["ports"][0]["containerPort"] == 9000
    assert rendered.get("Service", "gpu-mock-topology")["spec"]["type"] == "NodePort"


def test_staging_daemonset_wiring(render: RenderFn) -> None:
    rendered = render({"gpu": {"profile": "gb200", "count": 4}})
    ds = rendered.get("DaemonSet", "nvml-mock")
    spec = pod_spec(ds)
    stage = container(ds, "stage")
    env = env_of(stage)
    assert stage["command"] == ["nvml-mock-node-setup"]
    assert stage["args"] == ["run"]
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVML_MOCK_PROFILE"] == "gb200"
    assert env["NVML_MOCK_GPU_COUNT"] == "4"
    assert env["NVML_MOCK_OVERLAY_HOST_PATH"] == names.OVERLAY_HOST_PATH
    assert env["NVML_MOCK_CDI_SPEC_HOST_PATH"] == names.CDI_SPEC_HOST_PATH
    assert env["NVML_MOCK_NODE_LABELS"] == (
        "nvidia.com/gpu.present=true,nvml-mock.nvidia.com/staged=true"
    )
    assert stage["readinessProbe"]["exec"]["command"] == ["nvml-mock-node-setup", "check"]

    mounts = mounts_of(ds, stage)
    # The overlay is mounted at the host's own path, read-write, so the CDI spec the engine
    # writes names host paths.
    overlay_mount, overlay_volume = mounts[names.OVERLAY_HOST_PATH]
    assert not overlay_mount.get("readOnly", False)
    assert overlay_volume["hostPath"] == {
        "path": names.OVERLAY_HOST_PATH,
        "type": "DirectoryOrCreate",
    }
    assert mounts["/var/run/cdi"][1]["hostPath"]["path"] == "/var/run/cdi"

    security = stage["securityContext"]
    assert security["privileged"] is False
    assert security["capabilities"] == {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "MKNOD"],
    }
    assert spec["automountServiceAccountToken"] is True
    assert spec["serviceAccountName"] == "nvml-mock-staging"
    assert spec["tolerations"] == [{"operator": "Exists"}]


def test_gpu_mig_reaches_the_stager(render: RenderFn) -> None:
    def stage_env(mig: Any) -> dict[str, Any]:
        values = {} if mig is None else {"gpu": {"profile": "h100", "mig": mig}}
        return env_of(container(render(values).get("DaemonSet", "nvml-mock"), "stage"))

    assert "NVML_MOCK_MIG" not in stage_env(None)
    assert "NVML_MOCK_MIG" not in stage_env("")
    assert stage_env("all-1g.10gb")["NVML_MOCK_MIG"] == "all-1g.10gb"
    layout = [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 2}}]
    assert yaml.safe_load(stage_env(layout)["NVML_MOCK_MIG"]) == layout


def test_gpu_count_defaults_to_the_profile(render: RenderFn) -> None:
    ds = render().get("DaemonSet", "nvml-mock")
    assert env_of(container(ds, "stage"))["NVML_MOCK_GPU_COUNT"] == ""


def test_rbac_is_minimal(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    role = rendered.get("ClusterRole", f"nvml-mock-{NAMESPACE}-node-labeler")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    binding = rendered.get("ClusterRoleBinding", f"nvml-mock-{NAMESPACE}-node-labeler")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvml-mock-staging", "namespace": NAMESPACE}
    ]
    assert {k for k in rendered.kinds() if "Role" in k} == {"ClusterRole", "ClusterRoleBinding"}
    for (kind, _name), obj in rendered.objects.items():
        if kind == "ServiceAccount":
            assert obj["automountServiceAccountToken"] is False
    for kind, name in (("DaemonSet", "nvml-mock-nri"), ("Deployment", "nvml-mock-topology")):
        assert pod_spec(rendered.get(kind, name))["automountServiceAccountToken"] is False

    unlabelled = render({"nodeLabels": {"gpuPresent": False}})
    assert not {k for k in unlabelled.kinds() if "Role" in k}
    staging = unlabelled.get("DaemonSet", "nvml-mock")
    assert pod_spec(staging)["automountServiceAccountToken"] is False
    assert env_of(container(staging, "stage"))["NVML_MOCK_NODE_LABELS"] == ""


def _package_version(relative: str) -> str:
    text = (REPO_ROOT / relative).read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    assert match, relative
    return match.group(1)


COMPONENT_VERSIONS = {
    "image": "packages/nvml-engine/src/nvml_mock_engine/_version.py",
    "nri": "packages/nri-plugin/src/nvml_mock_nri/_version.py",
    "topology": "packages/topology-service/src/nvml_mock_topology/_version.py",
}


def test_default_image_tags_are_the_package_versions(chart: helm.Chart) -> None:
    values = chart.values
    tags = {
        "image": values["image"]["tag"],
        "nri": values["nri"]["image"]["tag"],
        "topology": values["topology"]["image"]["tag"],
    }
    assert tags == {key: _package_version(path) for key, path in COMPONENT_VERSIONS.items()}
    assert yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"] == tags["image"]


def test_image_references(render: RenderFn) -> None:
    default = render({"topology": DEMO_TOPOLOGY})
    images = {
        "stage": container(default.get("DaemonSet", "nvml-mock"), "stage"),
        "nri": container(default.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"),
        "topology": container(default.get("Deployment", "nvml-mock-topology"), "topology-service"),
    }
    versions = {key: _package_version(path) for key, path in COMPONENT_VERSIONS.items()}
    assert images["stage"]["image"] == f"nvml-mock-engine:{versions['image']}"
    assert images["nri"]["image"] == f"nvml-mock-nri-plugin:{versions['nri']}"
    assert images["topology"]["image"] == f"nvml-mock-topology-service:{versions['topology']}"
    assert {c["imagePullPolicy"] for c in images.values()} == {"IfNotPresent"}

    moved = render(VALUE_SETS["everything-moved"])
    stage = container(moved.get("DaemonSet", "gpu-mock"), "stage")
    nri = container(moved.get("DaemonSet", "gpu-mock-nri"), "nri-plugin")
    topology = container(moved.get("Deployment", "gpu-mock-topology"), "topology-service")
    registry = "registry.example.com/team"
    assert stage["image"] == f"{registry}/nvml-mock-engine:{versions['image']}"
    # A digest wins over the tag; the registry and pull policy are inherited from `image`.
    assert nri["image"] == f"{registry}/nvml-mock-nri-plugin@sha256:{'ab' * 32}"
    assert topology["image"] == f"{registry}/nvml-mock-topology-service:{versions['topology']}"
    assert {c["imagePullPolicy"] for c in (stage, nri, topology)} == {"Always"}

    own = render({"nri": {"image": {"registry": "other.example", "pullPolicy": "Never"}}})
    nri = container(own.get("DaemonSet", "nvml-mock-nri"), "nri-plugin")
    assert nri["image"] == f"other.example/nvml-mock-nri-plugin:{versions['nri']}"
    assert nri["imagePullPolicy"] == "Never"


def test_chart_version_alone_restarts_nothing(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    for kind, name in (
        ("DaemonSet", "nvml-mock"),
        ("DaemonSet", "nvml-mock-nri"),
        ("Deployment", "nvml-mock-topology"),
    ):
        labels = rendered.get(kind, name)["spec"]["template"]["metadata"]["labels"]
        assert "helm.sh/chart" not in labels


def test_profile_choices_are_the_engine_profiles(chart: helm.Chart) -> None:
    profiles_dir = REPO_ROOT / "packages/nvml-engine/src/nvml_mock_engine/profiles"
    engine = {p.stem for p in profiles_dir.glob("*.yaml")}
    assert engine, f"no profiles under {profiles_dir}"
    schema = chart.schema
    assert schema is not None
    assert set(schema["properties"]["gpu"]["properties"]["profile"]["enum"]) == engine
    assert chart.values["gpu"]["profile"] in engine


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"gpu": {"profile": "v100"}}, "profile"),
        ({"gpu": {"count": 0}}, "count"),
        ({"gpu": {"count": 65}}, "count"),
        ({"gpu": {"count": "8"}}, "count"),
        ({"gpu": {"mig": "half"}}, "mig"),
        ({"gpu": {"mig": [{"devices": "some"}]}}, "mig"),
        ({"gpu": {"mig": [{"mig-devices": {"1g.10gb": 8}}]}}, "mig"),
        ({"nri": {"deviceInjectionMode": "hooks"}}, "deviceInjectionMode"),
        ({"nri": {"excludedNamespaces": ["Not_A_Namespace"]}}, "excludedNamespaces"),
        ({"nri": {"socketPath": "relative/nri.sock"}}, "socketPath"),
        ({"logFormat": "xml"}, "logFormat"),
        ({"topolgy": {"enabled": True}}, "topolgy"),
        ({"nri": {"enabeld": True}}, "enabeld"),
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], needle: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(values, name="nvml-mock", namespace=NAMESPACE)
    assert needle in str(caught.value)


def test_notes_tell_how_to_check_the_install(render: RenderFn) -> None:
    notes = render({"topology": DEMO_TOPOLOGY}).notes
    assert "rollout status daemonset/nvml-mock-nri" in notes
    assert f"{NAMESPACE},kube-system" in notes
    assert "nvml-mock.nvidia.com/inject" in notes
    assert "nvml-mock-topology" in notes
    assert "not Ready" in notes
    disabled = render({"nri": {"enabled": False}}).notes
    assert "nothing injects" in disabled


@pytest.mark.parametrize(("index", "expected"), [("10", "10"), (5, "05"), ("07", "07")])
def test_plugin_index_is_two_digits(render: RenderFn, index: Any, expected: str) -> None:
    ds = render({"nri": {"pluginIndex": index}}).get("DaemonSet", "nvml-mock-nri")
    assert env_of(container(ds, "nri-plugin"))["NRI_PLUGIN_INDEX"] == expected


def test_stager_and_plugin_agree_on_the_mount_path(render: RenderFn) -> None:
    rendered = render({"nri": {"overlay": {"mountPath": "/usr/local/mock"}}})
    stage = env_of(container(rendered.get("DaemonSet", "nvml-mock"), "stage"))
    plugin = env_of(container(rendered.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    # The engine writes the mount path into the launchers; the plugin mounts it there.
    assert stage["NVML_MOCK_OVERLAY_MOUNT_PATH"] == "/usr/local/mock"
    assert plugin["NVML_MOCK_OVERLAY_MOUNT_PATH"] == "/usr/local/mock"


def test_annotation_names_and_driver_version_reach_the_components(render: RenderFn) -> None:
    default = render()
    plugin = env_of(container(default.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert plugin["NVML_MOCK_OPT_OUT_ANNOTATION"] == names.ANNOTATION_INJECT
    assert plugin["NVML_MOCK_DEVICE_ANNOTATION"] == names.ANNOTATION_DEVICES
    stage = env_of(container(default.get("DaemonSet", "nvml-mock"), "stage"))
    # Unset rather than empty: the engine takes an empty value as a value.
    assert "NVML_MOCK_DRIVER_VERSION" not in stage

    moved = render(
        {
            "driverVersion": "580.65.06",
            "nri": {"optOutAnnotation": "example.com/no-gpu", "deviceAnnotation": "gpu-devices"},
        }
    )
    plugin = env_of(container(moved.get("DaemonSet", "nvml-mock-nri"), "nri-plugin"))
    assert plugin["NVML_MOCK_OPT_OUT_ANNOTATION"] == "example.com/no-gpu"
    assert plugin["NVML_MOCK_DEVICE_ANNOTATION"] == "gpu-devices"
    stage = env_of(container(moved.get("DaemonSet", "nvml-mock"), "stage"))
    assert stage["NVML_MOCK_DRIVER_VERSION"] == "580.65.06"


@pytest.mark.parametrize(
    "values",
    [
        {"driverVersion": "latest"},
        {"nri": {"optOutAnnotation": "has space"}},
        {"nri": {"deviceAnnotation": "a/b/c"}},
    ],
)
def test_schema_rejects_bad_names(chart: helm.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.render(values, name="nvml-mock", namespace=NAMESPACE)
