"""The kind demo's DRA act without a cluster: its --dry-run's commands, its refusals, and its
assertions against answers a stand-in kubectl gives (a healthy cluster and broken ones).

The act installs NVIDIA's DRA driver with ``deploy/dra-driver/dra-driver-values.yaml``
(rendered against NVIDIA's chart in ``test_dra_driver_values``), makes a ComputeDomain
across the workers, runs ``check-fabric --imex`` in a workload with its channel claim, kills
one node's IMEX daemon and waits for its clique peer's domain state to say DEGRADED while the
peer's own ``-q`` stays READY, and checks that a pod
with a GPU claim lists exactly the allocated GPU.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from conftest import REPO_ROOT

DEMO = REPO_ROOT / "demo" / "kind"
RUN_SH = DEMO / "run.sh"
ACT = DEMO / "dra_act.sh"
CONTEXT = "kind-nvml-mock-node-wide-demo"


def _dry_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    for tool in ("docker", "kind", "kubectl", "helm"):
        stub = tmp_path / tool
        stub.write_text('#!/bin/sh\necho "$0 must not run in --dry-run" >&2\nexit 99\n')
        stub.chmod(0o755)
    environ = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "HOME": str(tmp_path), **env}
    return subprocess.run(
        ["bash", str(RUN_SH), "--dry-run"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_act_runs_after_the_plain_checks_in_order(tmp_path: Path) -> None:
    done = _dry_run(tmp_path, WITH_DRA_DRIVER="true")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    commands = [line[2:] for line in lines if line.startswith("+ ")]
    mock = next(c for c in commands if "upgrade --install" in c and "deploy/helm/nvml-mock" in c)
    assert "deploy/dra-driver/nvml-mock-values.yaml" in mock
    dra = next(c for c in commands if "upgrade --install nvidia-dra-driver-gpu" in c)
    assert "--values " + str(REPO_ROOT / "deploy/dra-driver/dra-driver-values.yaml") in dra
    assert commands.index(dra) > commands.index(mock)
    for command in commands:
        if command.startswith("kubectl"):
            assert command.startswith(f"kubectl --context {CONTEXT} "), command
        if command.startswith("helm"):
            assert command.startswith(f"helm --kube-context {CONTEXT} "), command
    steps = [line for line in lines if line.startswith("==> ")]
    act = [
        s for s in steps if "DRA" in s or "ComputeDomain" in s or "IMEX" in s or "GPU claim" in s
    ]
    assert len(act) == 4
    assert "wait computedomain/nvml-mock-cd '--for=jsonpath={.status.status}=Ready'" in done.stdout
    assert "-- check-fabric --imex" in done.stdout
    assert "-- nvidia-imex-ctl -c /imexd/imexd.cfg -q" in done.stdout
    kill = next(c for c in commands if " delete pod cd-daemon-on-" in c)
    victim = kill.split("delete pod ")[1].split()[0]
    probe = [c for c in commands if "nvidia-imex-ctl -c /imexd/imexd.cfg -q" in c]
    # the peer probed is the victim's clique partner (worker and worker2 are clique 0)
    assert victim.endswith("-worker") and all(
        c.split(" exec ")[1].startswith("cd-daemon-on-nvml-mock-node-wide-demo-worker2 ")
        for c in probe
    )


def test_without_the_act_nothing_of_it_runs(tmp_path: Path) -> None:
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nvidia-dra-driver-gpu" not in done.stdout
    assert "nvml-mock-values.yaml" not in done.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WITH_DRA_DRIVER": "yes"}, "WITH_DRA_DRIVER=yes must be true or false"),
        (
            {"WITH_DRA_DRIVER": "true", "GPU_PROFILE": "h100"},
            "WITH_DRA_DRIVER=true needs WITH_COMPUTE_DOMAIN=true",
        ),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, env: dict[str, str], message: str) -> None:
    done = _dry_run(tmp_path, **env)
    assert done.returncode == 2
    assert message in done.stderr


def test_the_manifests_validate() -> None:
    for path in sorted((DEMO / "dra").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["apiVersion"].startswith("resource.nvidia.com/"):
                assert doc["spec"]["channel"]["resourceClaimTemplate"]["name"]
                continue
            kubernetes_validate.validate(doc, "1.34", strict=True)


HARNESS = r"""
set -euo pipefail
SCRIPT_DIR="{demo}"; REPO_ROOT="{repo}"; DRY_RUN=false; WAIT_TIMEOUT=1s
WORKLOAD_NAMESPACE=default
CD_NODES=(w1:0 w2:0 w3:1 w4:1)
log() {{ printf '==> %s\n' "$*" >&3; }}
die() {{ printf 'error: %s\n' "$*" >&2; exit 1; }}
exec 3>&1
kc() {{ :; }}
hc() {{ :; }}
sleep() {{ :; }}
kq() {{
  case "$*" in
    *"nvidia-smi -L"*) printf '%s\n' "${{LISTING}}" ;;
    *resourceClaimName*) echo claim-1 ;;
    *allocation.devices*) echo gpu-1 ;;
    *resourceslices*) echo GPU-aaaa ;;
    *"computeDomain="*) printf 'w1 d1\nw2 d2\nw3 d3\nw4 d4\n' ;;
    *spec.nodeName*) echo w3 ;;
    *"-q"*)
      if [[ "$*" == *" d2 "* ]]; then
        n=$(( $(cat "${{COUNTER}}") + 1 )); echo "${{n}}" > "${{COUNTER}}"
        (( n > ${{#STATES[@]}} )) && n=${{#STATES[@]}}
        echo "${{STATES[n-1]}}"
      fi ;;
    *"-N"*)
      if [[ "$*" == *" d2 "* ]]; then
        n=$(( $(cat "${{NCOUNTER}}") + 1 )); echo "${{n}}" > "${{NCOUNTER}}"
        (( n > ${{#DOMAINS[@]}} )) && n=${{#DOMAINS[@]}}
        printf 'Nodes:\n\nDomain State: %s\n' "${{DOMAINS[n-1]}}"
      fi ;;
    *) ;;
  esac
}}
COUNTER="$(mktemp)"; echo 0 > "${{COUNTER}}"
NCOUNTER="$(mktemp)"; echo 0 > "${{NCOUNTER}}"
source "{act}"
"""


def _act(function: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = HARNESS.format(demo=DEMO, repo=REPO_ROOT, act=ACT) + env.pop("PRE", "") + function
    return subprocess.run(
        ["bash", "-c", script],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_gpu_claim_must_show_exactly_the_allocated_gpu() -> None:
    good = "GPU 0: NVIDIA GB200 (UUID: GPU-aaaa)"
    assert _act("assert_gpu_claim", LISTING=good).returncode == 0
    two = good + "\nGPU 1: NVIDIA GB200 (UUID: GPU-bbbb)"
    done = _act("assert_gpu_claim", LISTING=two)
    assert done.returncode == 1 and "lists 2 GPUs, not 1" in done.stderr
    other = "GPU 0: NVIDIA GB200 (UUID: GPU-bbbb)"
    done = _act("assert_gpu_claim", LISTING=other)
    assert done.returncode == 1 and "does not see gpu-1 (GPU-aaaa) as GPU 0" in done.stderr


def test_the_peers_domain_must_degrade_and_the_peer_stay_ready_after_the_kill() -> None:
    """``-q`` is the daemon's own readiness (NVIDIA's compute-domain daemon's probe): the
    survivor stays READY; its node status says the domain is DEGRADED."""
    act = "CD_UID=x; assert_imex_degrades"
    ok = _act(act, PRE="STATES=(READY READY)\nDOMAINS=(UP UP DEGRADED)\n")
    assert ok.returncode == 0, ok.stderr
    stuck = _act(act, PRE="STATES=(READY READY)\nDOMAINS=(UP)\n")
    assert stuck.returncode == 1
    assert "d2 on w2 still reports Domain State: UP after its peer d1 was killed" in stuck.stderr
    unready = _act(act, PRE="STATES=(READY DEGRADED)\nDOMAINS=(DEGRADED)\n")
    assert unready.returncode == 1
    assert "d2 on w2 is no longer READY after its peer was killed: DEGRADED" in unready.stderr
    early = _act(act, PRE="STATES=(INITIALIZING)\nDOMAINS=(UP)\n")
    assert early.returncode == 1 and "is not READY before the kill" in early.stderr
