"""A real Prometheus server scrapes the exporter on loopback: the standard dashboard's PromQL
answers for every GPU, an injected Xid arrives within two scrapes, a pod's allocation labels
its GPU's series."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import facts
from conftest import Exporter, Node, Prometheus, needs_prometheus

pytestmark = needs_prometheus


def _substitute(expr: str, **values: str) -> str:
    return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], expr)  # as Grafana does for one value


def test_every_dashboard_expression_answers_for_every_gpu_of_an_8_gpu_node(
    node: Node,
    run_exporter: Callable[..., Exporter],
    prometheus: Callable[..., Prometheus],
) -> None:
    node.ctl("util", "steady", "60", "-i", "all")  # tensor-core activity is then non-zero too
    exporter = run_exporter()
    server = prometheus([f"127.0.0.1:{exporter.port}"])
    variables, exprs = facts.dashboard()
    assert variables["instance"] == "label_values(DCGM_FI_DEV_GPU_TEMP, instance)"
    # the template variables: every instance and GPU that has a temperature series
    temps = server.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == node.gpus)
    instances = sorted({r["metric"]["instance"] for r in temps})
    gpus = sorted({r["metric"]["gpu"] for r in temps}, key=int)
    assert instances == [f"127.0.0.1:{exporter.port}"]
    assert gpus == [str(i) for i in range(8)]
    # the profiling family needs two GPM samples: wait for it once, then ask everything
    server.wait_for("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE > 0", lambda r: len(r) == node.gpus)
    for gpu in gpus:
        for expr in exprs:
            query = _substitute(expr, instance=instances[0], gpu=gpu)
            result = server.query(query)
            assert result, f"{query}: empty for GPU {gpu}"
            if "{" in expr.split("(", 1)[-1] and not expr.startswith(("avg(", "sum(")):
                assert [r["metric"]["gpu"] for r in result] == [gpu], query


def test_an_injected_xid_reaches_dcgm_fi_dev_xid_errors_within_two_scrapes(
    node: Node,
    run_exporter: Callable[..., Exporter],
    prometheus: Callable[..., Prometheus],
) -> None:
    exporter = run_exporter()
    server = prometheus([f"127.0.0.1:{exporter.port}"], interval="1s")
    server.wait_for('DCGM_FI_DEV_XID_ERRORS{gpu="3"} == 0', lambda r: len(r) == 1)
    scrapes = 'prometheus_target_interval_length_seconds_count{interval="1s"}'

    def scrape_count() -> float:
        answer = server.query(f"sum({scrapes})")
        return float(answer[0]["value"][1]) if answer else 0.0

    node.ctl("xid", "48", "-i", "3")
    injected = scrape_count()
    deadline = time.monotonic() + 30
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = server.query('DCGM_FI_DEV_XID_ERRORS{gpu="3"} == 48')
        if seen:
            break
        time.sleep(0.1)
    assert seen, "Xid 48 never reached Prometheus"
    assert scrape_count() - injected <= 2, "more than two scrapes before the Xid showed"
    # the others stay at 0, and the value latches
    assert {r["metric"]["gpu"] for r in server.query("DCGM_FI_DEV_XID_ERRORS > 0")} == {"3"}
    counted = server.wait_for('DCGM_EXP_XID_ERRORS_COUNT{gpu="3",xid="48"}', lambda r: len(r) == 1)
    assert counted[0]["value"][1] == "1"
    assert counted[0]["metric"]["window_size_in_ms"] == "300000"


def test_a_pods_allocation_gives_its_gpus_series_the_pod_label(
    node: Node,
    run_exporter: Callable[..., Exporter],
    prometheus: Callable[..., Prometheus],
) -> None:
    exporter = run_exporter()
    server = prometheus([f"127.0.0.1:{exporter.port}"])
    node.ctl(
        "alloc",
        "--pid",
        "4242",
        "--gpus",
        "5",
        "--memory",
        "20Gi",
        "--utilization",
        "steady 70",
        "--name",
        "trainer",
        "--pod",
        "train-0",
        "--namespace",
        "ml",
    )
    held = server.wait_for('DCGM_FI_DEV_FB_USED{pod="train-0"}', lambda r: len(r) == 1)
    labels = held[0]["metric"]
    assert (labels["gpu"], labels["namespace"], labels["container"]) == ("5", "ml", "trainer")
    assert float(held[0]["value"][1]) >= 20 * 1024
    util = server.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="train-0"} == 70', lambda r: len(r) == 1)
    assert util[0]["metric"]["gpu"] == "5"
    # the GPUs nobody holds carry no pod label
    assert server.query('DCGM_FI_DEV_GPU_TEMP{pod!=""}')[0]["metric"]["gpu"] == "5"
    assert len(server.query('DCGM_FI_DEV_GPU_TEMP{pod=""}')) == node.gpus - 1


def test_the_charts_alert_rules_fire_on_an_xid_and_a_hot_gpu(
    node: Node,
    run_exporter: Callable[..., Exporter],
    prometheus: Callable[..., Prometheus],
) -> None:
    rules = Path(__file__).resolve().parents[3] / "deploy/helm/nvml-mock/alerts/gpu-alerts.yaml"
    exporter = run_exporter()
    server = prometheus([f"127.0.0.1:{exporter.port}"], rules=rules)
    server.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == node.gpus)
    assert server.query('ALERTS{alertstate="firing"}') == []
    node.ctl("fail", "thermal", "-i", "2", "--temp", "92")
    node.ctl("xid", "43", "-i", "2")
    firing = server.wait_for(
        'ALERTS{alertname="GPUXidError",alertstate="firing"}', lambda r: len(r) == 1
    )
    assert (firing[0]["metric"]["gpu"], firing[0]["metric"]["severity"]) == ("2", "warning")
    # the temperature rule holds for 30 s first: it is pending on GPU 2 alone
    pending = server.wait_for('ALERTS{alertname="GPUTemperatureHigh"}', lambda r: len(r) == 1)
    assert pending[0]["metric"]["gpu"] == "2"
