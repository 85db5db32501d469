"""check-fabric when the topology service cannot be reached: exit 1, GPUs still reported."""

from __future__ import annotations

import json

from conftest import RenderState, RunCheck, free_port
from fabric_values import fabric_env


def test_an_unreachable_service_exits_1_after_reporting_the_gpus(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 2, node="worker-1")
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
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
