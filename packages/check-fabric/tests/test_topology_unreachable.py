"""check-fabric when the topology service cannot be reached: exit 1, GPUs still reported."""

from __future__ import annotations

import json
import socket

from conftest import RenderState, RunCheck
from fabric_values import fabric_env


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_service_exits_1_after_reporting_the_gpus(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 2, node="worker-1")
    url = f"http://127.0.0.1:{_closed_port()}"
    env = fabric_env(clique=0) | {"NODE_NAME": "worker-1"}
    done = run_check(state, "--topology-url", url, "--topology-timeout", "3", env=env)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "Discovered 2 GPU(s)"
    assert done.stderr.startswith(f"topology: GET {url}/v1/nodes/worker-1/identity: cannot connect")

    done = run_check(state, "--json", "--topology-url", url, env=env)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["error"]["kind"] == "topology"
    assert len(doc["gpus"]) == 2  # what NVML reported is kept
