"""check-fabric when the topology service cannot be reached: exit 1, GPUs still reported."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
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


@pytest.fixture
def interruptible() -> Iterator[None]:
    """Children that can be interrupted: a shell's background job (a CI runner's, say) runs
    with SIGINT ignored, which every child inherits, and Python then installs no handler.
    A handled signal is reset to the default in a child, so handle it here meanwhile."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("interruptible")
def test_an_interrupt_while_waiting_for_the_service_exits_130(
    render_state: RenderState, library_dir: Path
) -> None:
    state = render_state("gb200", 2, node="worker-1")
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = dict(os.environ) | fabric_env(clique=0)
        env |= {"NODE_NAME": "worker-1", "LD_LIBRARY_PATH": str(library_dir)}
        env["MOCK_NVML_CONFIG"] = str(state)
        argv = [sys.executable, "-m", "check_fabric", "--topology-url", url]
        process = subprocess.Popen(
            [*argv, "--topology-timeout", "60"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            lines = [process.stdout.readline() for _ in range(1 + 2 * 4)]
            assert lines[0] == "Discovered 2 GPU(s)\n", lines
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
