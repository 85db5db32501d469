"""The metrics exporter in the chart: the GPU operator's DaemonSet, Service and ServiceMonitor
shape, the overlay it reads, the alert rules (run with promtool) and the standard dashboard."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from conftest import CHART_DIR, NAMESPACE, REPO_ROOT, RenderFn
from manifests import container, env_of, pod_spec
from nvml_mock_protocol import names

ON = {"exporter": {"enabled": True}}
ALL = {
    "exporter": {
        "enabled": True,
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "prometheusConfig": {"enabled": True},
        "counters": "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n",
    }
}
DASHBOARD_FACTS = (
    REPO_ROOT / "packages" / "exporter" / "tests" / "fixtures" / "grafana-12239.promql"
)
ALERTS = CHART_DIR / "alerts" / "gpu-alerts.yaml"


def _facts() -> tuple[list[str], list[str]]:
    variables, exprs = [], []
    for line in DASHBOARD_FACTS.read_text().splitlines():
        if line.startswith("variable "):
            variables.append(line.split(" ", 2)[2])
        elif line.startswith("expr "):
            exprs.append(line[5:])
    return variables, exprs


def test_off_by_default(render: RenderFn) -> None:
    rendered = render()
    assert not [key for key in rendered.objects if "dcgm" in key[1] or "gpu-" in key[1]]


def test_the_gpu_operators_service_shape(render: RenderFn) -> None:
    rendered = render(ON)
    service = rendered.get("Service", "nvidia-dcgm-exporter")
    assert service["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    (port,) = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == (
        names.EXPORTER_PORT_NAME,
        names.EXPORTER_PORT,
        "gpu-metrics",
    )
    daemonset = rendered.get("DaemonSet", "nvidia-dcgm-exporter")
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert labels["app"] == "nvidia-dcgm-exporter"
    exporter = container(daemonset, "exporter")
    assert exporter["ports"] == [{"name": "gpu-metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert exporter["readinessProbe"]["httpGet"] == {"path": "/health", "port": "gpu-metrics"}


def test_the_service_monitor_selects_the_service_on_its_port(render: RenderFn) -> None:
    rendered = render(ALL)
    monitor = rendered.get("ServiceMonitor", "nvidia-dcgm-exporter")
    service = rendered.get("Service", "nvidia-dcgm-exporter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in selector.items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("gpu-metrics", "/metrics")
    # without the operator's API (and "auto"), none is rendered
    assert ("ServiceMonitor", "nvidia-dcgm-exporter") not in render(ON).objects


def test_the_exporter_reads_the_overlay_read_only_on_the_staged_nodes(render: RenderFn) -> None:
    rendered = render(ALL)
    daemonset = rendered.get("DaemonSet", "nvidia-dcgm-exporter")
    staging = rendered.get("DaemonSet", "nvml-mock")
    spec, stager = pod_spec(daemonset), pod_spec(staging)
    assert spec["affinity"] == stager["affinity"]
    assert spec["tolerations"] == stager["tolerations"]
    assert spec["automountServiceAccountToken"] is False
    exporter = container(daemonset, "exporter")
    env = env_of(exporter)
    assert env["LD_LIBRARY_PATH"] == f"{names.OVERLAY_MOUNT_PATH}/lib"
    assert env["MOCK_NVML_CONFIG"] == f"{names.OVERLAY_MOUNT_PATH}/config/state.nvmlmock"
    assert env["NVML_MOCK_EXPORTER_COLLECTORS"] == "/etc/nvml-mock-exporter/counters.csv"
    overlay = next(m for m in exporter["volumeMounts"] if m["name"] == "overlay")
    assert overlay == {"name": "overlay", "mountPath": names.OVERLAY_MOUNT_PATH, "readOnly": True}
    volume = next(v for v in spec["volumes"] if v["name"] == "overlay")
    assert volume["hostPath"]["path"] == names.OVERLAY_HOST_PATH
    assert exporter["securityContext"]["readOnlyRootFilesystem"] is True
    counters = rendered.get("ConfigMap", "nvml-mock-exporter-counters")
    assert counters["data"]["counters.csv"].startswith("DCGM_FI_DEV_GPU_TEMP, gauge")


@pytest.mark.parametrize("kube_version", ("1.28.0", kubernetes_validate.latest_version()))
def test_the_core_objects_are_valid_kubernetes(render: RenderFn, kube_version: str) -> None:
    for (kind, name), obj in render(ALL).objects.items():
        mine = obj["metadata"]["labels"].get("app") == "nvidia-dcgm-exporter"
        if not mine or obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "nvml-mock"
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind} {name} is invalid for Kubernetes {kube_version}: {exc.message}")


def test_the_dashboard_carries_the_standard_dashboards_promql(render: RenderFn) -> None:
    rendered = render(ON)
    configmap = rendered.get("ConfigMap", "nvml-mock-gpu-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["gpu-metrics.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    variables = [
        v["query"] for v in dashboard["templating"]["list"] if v["name"] in ("instance", "gpu")
    ]
    assert (variables, exprs) == _facts()


def test_the_prometheus_rule_and_the_plain_config_carry_the_alert_rules(render: RenderFn) -> None:
    rendered = render(ALL)
    rules = yaml.safe_load(ALERTS.read_text())
    assert rendered.get("PrometheusRule", "nvml-mock-gpu-alerts")["spec"] == rules
    plain = rendered.get("ConfigMap", "nvml-mock-gpu-metrics-prometheus")["data"]
    assert yaml.safe_load(plain["gpu-alerts.yaml"]) == rules
    (job,) = yaml.safe_load(plain["scrape-config.yaml"])["scrape_configs"]
    assert job["job_name"] == "gpu-metrics"
    (discovery,) = job["kubernetes_sd_configs"]
    assert discovery == {"role": "endpoints", "namespaces": {"names": [NAMESPACE]}}
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep"
    assert keep["source_labels"] == [
        "__meta_kubernetes_service_label_app",
        "__meta_kubernetes_endpoint_port_name",
    ]
    assert keep["regex"] == "nvidia-dcgm-exporter;gpu-metrics"


needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="needs promtool (Debian's prometheus package: apt-get install prometheus)",
)


@needs_promtool
def test_promtool_accepts_the_rules(render: RenderFn, tmp_path: Path) -> None:
    # (Debian's Prometheus is built without Kubernetes discovery, so `promtool check config`
    # cannot read the scrape config's kubernetes_sd_configs there: its shape is checked above)
    plain = render(ALL).get("ConfigMap", "nvml-mock-gpu-metrics-prometheus")["data"]
    (tmp_path / "gpu-alerts.yaml").write_text(plain["gpu-alerts.yaml"])
    done = subprocess.run(
        ["promtool", "check", "rules", "gpu-alerts.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout


@needs_promtool
def test_the_alerts_fire_on_a_thermal_fault_and_an_xid(tmp_path: Path) -> None:
    (tmp_path / "gpu-alerts.yaml").write_text(ALERTS.read_text())
    gpu = 'gpu="3",UUID="GPU-3",hostname="node-a",instance="node-a:9400",job="gpu-metrics"'
    tests = {
        "rule_files": ["gpu-alerts.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}}", "values": "40 40 92 92 92 92"},
                    {"series": f"DCGM_FI_DEV_XID_ERRORS{{{gpu}}}", "values": "0 0 0 79 79 79"},
                ],
                "alert_rule_test": [
                    {"eval_time": "15s", "alertname": "GPUTemperatureHigh", "exp_alerts": []},
                    {
                        "eval_time": "75s",
                        "alertname": "GPUTemperatureHigh",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    **dict(p.split("=") for p in gpu.replace('"', "").split(",")),
                                },
                                "exp_annotations": {
                                    "summary": "GPU 3 on node-a is at 92 C",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "60s",
                        "alertname": "GPUFellOffTheBus",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    **dict(p.split("=") for p in gpu.replace('"', "").split(",")),
                                },
                                "exp_annotations": {
                                    "summary": "GPU 3 (GPU-3) on node-a has fallen off the bus "
                                    "(Xid 79)"
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        ["promtool", "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
