"""check-fabric --topology-url against a real topology service and the real mock library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RenderState, RunCheck, free_port
from fabric_values import CD_UUID, PROFILE_DEFAULT_UUID, fabric_env

TOPOLOGY = f"""\
version: 1
domains:
  - name: cd
    uuid: {CD_UUID}
    cliques:
      - id: 0
        nodes: [worker-1, worker-2]
      - id: 1
        nodes: [worker-3, worker-4]
"""


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"topology service exited {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"topology service not ready within 30 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def topology_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real topology service on loopback serving ``TOPOLOGY``; yields its base URL.

    One service serves the whole module: the tests only read from it.
    """
    tmp_path = tmp_path_factory.mktemp("topology")
    doc = tmp_path / "topology.yaml"
    doc.write_text(TOPOLOGY)
    port = free_port()
    log = tmp_path / "topology-service.log"
    argv = [sys.executable, "-m", "nvml_mock_topology", "--topology-file", str(doc)]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVML_MOCK_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _revision(url: str, node: str) -> int:
    with urllib.request.urlopen(f"{url}/v1/nodes/{node}/identity", timeout=5) as resp:
        return int(json.load(resp)["revision"])


def test_node_where_nvml_matches_the_service_exits_0(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    state = render_state("gb200", 4, node="worker-3")
    env = fabric_env(clique=1) | {"NODE_NAME": "worker-3"}
    done = run_check(state, "--topology-url", topology_url, env=env)
    assert done.returncode == 0, done.stderr
    revision = _revision(topology_url, "worker-3")
    assert done.stderr == (
        f"topology: ok: topology service ({topology_url}/v1/nodes/worker-3/identity, node "
        f"worker-3, revision {revision}) agrees: clusterUuid {CD_UUID} cliqueId 1\n"
    )
    assert done.stdout.splitlines()[0] == "Discovered 4 GPU(s)"


def test_node_where_nvml_differs_from_the_service_exits_3(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    # The service places worker-1 in clique 0; the container was given clique 1.
    state = render_state("gb200", 2, node="worker-1")
    env = fabric_env(clique=1) | {"CHECK_FABRIC_TOPOLOGY_URL": topology_url}
    done = run_check(state, "--node-name", "worker-1", env=env)
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("topology: MISMATCH: topology service (")
    assert done.stderr.rstrip().endswith(
        f"says clusterUuid {CD_UUID} cliqueId 0, but GPU 0 reports clusterUuid {CD_UUID} "
        f"cliqueId 1, GPU 1 reports clusterUuid {CD_UUID} cliqueId 1"
    )


def test_node_in_no_clique_whose_gpus_claim_one_exits_3(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    state = render_state("gb200", 2, node="worker-9")
    done = run_check(state, "--topology-url", topology_url, env={"NODE_NAME": "worker-9"})
    assert done.returncode == 3, done.stderr
    assert "places the node in no clique, but GPU 0 reports clusterUuid " in done.stderr
    assert f"{PROFILE_DEFAULT_UUID} cliqueId 0" in done.stderr


def test_node_in_no_clique_without_fabric_agrees_and_stays_not_supported(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    state = render_state("t4", 2, node="worker-9")
    done = run_check(state, "--json", "--topology-url", topology_url, "--node-name", "worker-9")
    assert done.returncode == 2, done.stderr
    doc = json.loads(done.stdout)
    assert doc["verdict"] == "not_supported"
    assert doc["checks"][-1]["name"] == "topology"
    assert doc["checks"][-1]["passed"] is True
    topology = doc["topology"]
    assert (topology["node"], topology["inClique"], topology["identity"]) == (
        "worker-9",
        False,
        None,
    )
    assert topology["url"] == f"{topology_url}/v1/nodes/worker-9/identity"
    assert isinstance(topology["detail"], str) and topology["detail"]
    assert isinstance(topology["revision"], int)  # the revision of the node's absence


def test_json_carries_the_services_answer(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    state = render_state("gb200", 4, node="worker-2")
    env = fabric_env(clique=0) | {"NODE_NAME": "worker-2"}
    done = run_check(state, "--json", "--topology-url", topology_url + "/", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["topology"] == {
        "url": f"{topology_url}/v1/nodes/worker-2/identity",
        "node": "worker-2",
        "inClique": True,
        "identity": {"clusterUuid": CD_UUID, "cliqueId": 0},
        "domain": "cd",
        "revision": _revision(topology_url, "worker-2"),
        "detail": None,
    }
    assert doc["checks"][-1]["passed"] is True


def test_a_url_that_is_not_a_topology_service_exits_1(
    render_state: RenderState, run_check: RunCheck, topology_url: str
) -> None:
    state = render_state("gb200", 2, node="worker-1")
    env = fabric_env(clique=0) | {"NODE_NAME": "worker-1"}
    done = run_check(state, "--topology-url", topology_url + "/nope", env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"topology: GET {topology_url}/nope/v1/nodes/worker-1/identity: 404 ("
    )
    assert done.stderr.rstrip().endswith("the URL does not point at a topology service")
