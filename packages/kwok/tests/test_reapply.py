"""A second ``apply`` of the same fleet sends no write; a changed one converges.

A loopback HTTP server stands in for the API server: it lists the fleet's objects as a
cluster that already holds them would (with what the server and KWOK add: UIDs,
resourceVersions, KWOK's conditions) and records every request. ``test_apply_live.py``
checks the same against a real kube-apiserver where one is given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import yaml
from loopback import api_server
from nvml_mock_kwok.apply import holds, node_holds
from nvml_mock_kwok.cli import EXIT_OK, main

FLEET = ["--nodes", "18", "--no-stages"]


class _Cluster(BaseHTTPRequestHandler):
    nodes: dict[str, Any] = {}
    slices: dict[str, Any] = {}
    writes: list[str] = []

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        store = {
            "/api/v1/nodes": self.nodes,
            "/apis/resource.k8s.io/v1/resourceslices": self.slices,
        }
        if path in store:
            self._send(200, {"items": list(store[path].values()), "metadata": {}})
        else:
            self._send(404, {"message": "not found"})

    def _write(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = yaml.safe_load(self.rfile.read(length) or b"{}")
        self.writes.append(f"{self.command} {self.path.split('?', 1)[0]}")
        name = (body.get("metadata") or {}).get("name", "x")
        body.setdefault("metadata", {})["uid"] = f"uid-{name}"
        self._send(200, body)

    def do_PATCH(self) -> None:
        self._write()

    def do_POST(self) -> None:
        self._write()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads ``writes``."""


def _as_stored(obj: dict[str, Any], version: int) -> dict[str, Any]:
    """The object as a cluster holding it lists it."""
    stored = json.loads(json.dumps(obj))
    stored["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion=str(version))
    if obj["kind"] == "Node":
        stored["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        stored["status"]["addresses"] = [{"type": "InternalIP", "address": "10.0.0.1"}]
    else:
        owner = obj["spec"]["nodeName"]
        stored["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": owner, "uid": f"uid-{owner}",
             "controller": True}
        ]  # fmt: skip
        stored["spec"].setdefault("perDeviceNodeSelection", False)  # a server default
    return stored


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, type[_Cluster]]]:
    generated = tmp_path / "fleet.yaml"
    assert main(["generate", *FLEET, "-o", str(generated)]) == EXIT_OK
    objects = list(yaml.safe_load_all(generated.read_text()))
    handler = type("Cluster", (_Cluster,), {"nodes": {}, "slices": {}, "writes": []})
    for version, obj in enumerate(objects, start=100):
        store = handler.nodes if obj["kind"] == "Node" else handler.slices
        store[obj["metadata"]["name"]] = _as_stored(obj, version)
    with api_server(handler, tmp_path / "kubeconfig") as kubeconfig:
        yield kubeconfig, handler


def test_a_second_apply_of_the_same_fleet_sends_no_write(
    cluster: tuple[Path, type[_Cluster]],
) -> None:
    kubeconfig, handler = cluster
    assert len(handler.nodes) == 18 and len(handler.slices) == 36
    assert main(["apply", *FLEET, "--kubeconfig", str(kubeconfig)]) == EXIT_OK
    assert handler.writes == []


def test_a_changed_node_or_slice_is_applied_again(
    cluster: tuple[Path, type[_Cluster]],
) -> None:
    kubeconfig, handler = cluster
    node = handler.nodes["kwok-gpu-00003"]
    node["metadata"]["labels"]["nvidia.com/gpu.stale"] = "x"  # a label no run makes now
    handler.nodes["kwok-gpu-00005"]["status"]["capacity"]["nvidia.com/gpu"] = "3"
    handler.slices["kwok-gpu-00007-gpu-0"]["spec"]["devices"].pop()
    assert main(["apply", *FLEET, "--kubeconfig", str(kubeconfig)]) == EXIT_OK
    assert sorted(handler.writes) == [
        "PATCH /api/v1/nodes/kwok-gpu-00003",
        "PATCH /api/v1/nodes/kwok-gpu-00003/status",
        "PATCH /api/v1/nodes/kwok-gpu-00005",
        "PATCH /api/v1/nodes/kwok-gpu-00005/status",
        "PATCH /apis/resource.k8s.io/v1/resourceslices/kwok-gpu-00007-gpu-0",
    ]


def test_the_fake_taint_dropped_is_applied_away(cluster: tuple[Path, type[_Cluster]]) -> None:
    kubeconfig, handler = cluster
    handler.nodes["kwok-gpu-00001"]["spec"]["taints"] = [
        {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
    ]
    assert main(["apply", *FLEET, "--kubeconfig", str(kubeconfig)]) == EXIT_OK
    assert "PATCH /api/v1/nodes/kwok-gpu-00001" in handler.writes


def test_what_holds_means() -> None:
    assert holds({"a": 1, "b": [{"x": 1, "y": 2}]}, {"b": [{"x": 1}]})
    assert not holds({"b": [{"x": 1}, {"x": 2}]}, {"b": [{"x": 1}]})
    assert not holds({"a": "64"}, {"a": "64000m"})  # not equal as written: applied again
    wanted = {"metadata": {"labels": {"nvidia.com/a": "1"}}, "spec": {}, "status": {}}
    other = {"metadata": {"labels": {"nvidia.com/a": "1", "zone": "z"}}, "spec": {}}
    assert node_holds(other, wanted)  # another owner's label is none of this run's business
