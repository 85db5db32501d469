"""The local demo's scenario, end to end: the same script `make demo` runs.

Real parts only: the topology service and four NRI plugins as processes, the runtime test
double, the staged overlay with the mock library, nvidia-smi and check-fabric run by the
workloads. The assertions are the demo's own (it exits non-zero on any mismatch); this test
also reads its summary table back, so a demo that silently checked nothing would fail here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "local" / "run.py"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("GPU_PROFILE", "GPU_COUNT")}
    environ.update(env, DEMO_WORKDIR=str(tmp_path / "demo"))
    return subprocess.run(
        [sys.executable, str(DEMO)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _summary(stdout: str) -> list[list[str]]:
    lines = stdout.split("== Summary", 1)[1].strip().splitlines()
    rows = []
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        cells = [cell for cell in line.strip().split("  ") if cell.strip()]
        rows.append([cell.strip() for cell in cells])
    return rows


def test_compute_domain_scenario(tmp_path: Path) -> None:
    done = _run(tmp_path, GPU_PROFILE="gb200", GPU_COUNT="4")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "DEMO PASSED" in done.stdout
    rows = _summary(done.stdout)
    inject = {row[1]: row for row in rows if row[0] == "inject"}
    assert len(inject) == 4
    cliques = [inject[node][3] for node in sorted(inject)]
    assert cliques == ["0", "0", "1", "1"]
    assert {row[4] for row in inject.values()} == {"00000000-0000-0000-0000-0000000000cd"}
    assert all(row[2] == "4" for row in inject.values())
    if os.geteuid() == 0:
        # Root stages the IMEX channels: every ComputeDomain workload opted in and found the
        # staged eight usable, in the first act and in the kept workloads rechecked later.
        assert {row[5] for row in inject.values()} == {"8/8"}
        assert {row[5] for row in rows if row[0] == "rebind: running"} == {"8/8"}
    rebound = [row for row in rows if row[0] == "rebind: new"]
    assert len(rebound) == 4 and {row[3] for row in rebound} == {"99"}
    kept = [row for row in rows if row[0] == "rebind: running"]
    assert sorted(row[3] for row in kept) == ["0", "0", "1", "1"]
    down = [row for row in rows if row[0] == "topology down"]
    assert len(down) == 4 and {row[3] for row in down} == {"99"}
    stopped = [row for row in rows if row[0] == "plugin stopped"]
    assert len(stopped) == 1 and stopped[0][2] == "0" and stopped[0][-1] == "FAIL-OPEN"
    xid = {row[1]: row for row in rows if row[0] == "xid 79"}
    assert len(xid) == 4
    assert [xid[node][-1] for node in sorted(xid)] == ["LOST", "PASS", "PASS", "PASS"]
    assert [xid[node][2] for node in sorted(xid)] == ["3", "4", "4", "4"]
    reset = [row for row in rows if row[0] == "xid 79: reset"]
    assert len(reset) == 4 and {row[2] for row in reset} == {"4"}
    allocated = [row for row in rows if row[0] == "allocated"]
    assert len(allocated) == 1 and allocated[0][2] == "1" and allocated[0][-1] == "PASS"
    # The 50% scenario: the seed picks two of the four nodes, the same two every run.
    scenario = {row[1]: row for row in rows if row[0] == "scenario"}
    assert len(scenario) == 4
    lost = sorted(node for node, row in scenario.items() if row[-1] == "LOST")
    assert lost == picked_by_the_demo_scenario(sorted(scenario))
    assert {scenario[node][2] for node in lost} == {"3"}
    assert {row[2] for node, row in scenario.items() if node not in lost} == {"4"}
    assert "nvml-mock-ctl scenario status xid-79-half" in done.stdout
    removed = [row for row in rows if row[0] == "scenario: removed"]
    assert len(removed) == 4 and {row[2] for row in removed} == {"4"}


def _imex_rows(stdout: str) -> list[list[str]]:
    lines = stdout.split("== IMEX domain", 1)[1].strip().splitlines()
    rows = []
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return rows


def test_imex_act_two_daemons_ready_then_degraded(tmp_path: Path) -> None:
    """Two IMEX daemons (the driver root's nvidia-imex) on two simulated nodes reach READY,
    their domain UP; the second is killed and the first reports its domain degraded while its
    own daemon stays READY (``-q`` is the daemon's readiness, not the domain's)."""
    done = _run(tmp_path, GPU_PROFILE="gb200", GPU_COUNT="2")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    rows = _imex_rows(done.stdout)
    up = [row for row in rows if row[:2] == ["imex:", "up"]]
    assert len(up) == 2 and {row[-2] for row in up} == {"READY/UP"}
    assert len({row[3] for row in up}) == 2  # two nodes, two addresses
    killed = [row for row in rows if row[:3] == ["imex:", "peer", "killed"]]
    assert [row[-2:] for row in killed] == [
        ["READY/DEGRADED", "PASS"],
        ["UNREACHABLE", "KILLED"],
    ]
    assert "Domain State: DEGRADED" in done.stdout


def _cuda_rows(stdout: str) -> dict[str, list[str]]:
    """The CUDA act's summary: step -> [seen, verdict]."""
    lines = stdout.split("== CUDA in a pod", 1)[1].strip().splitlines()
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        cells = [cell.strip() for cell in line.strip().split("  ") if cell.strip()]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize(("profile", "runtime"), [("t4", "13"), ("a100", "12")])
def test_cuda_act_a_pod_sees_allocates_shows_and_fails_after_xid(
    tmp_path: Path, profile: str, runtime: str
) -> None:
    """An annotated pod's CUDA program, through the plugin's preload of the runtime
    work-alike, sees its one GPU, allocates 256 MiB and copies exactly; the node's nvidia-smi
    lists it; Xid 79 fails its next call with the real driver's error. The a100 profile's
    driver is CUDA 12, which the CUDA 13 runtime refuses: the program falls back to 12."""
    done = _run(tmp_path, GPU_PROFILE=profile, GPU_COUNT="2", WITH_COMPUTE_DOMAIN="false")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    rows = _cuda_rows(done.stdout)
    for step in ("plugin: LD_PRELOAD", "devices", "cudaMalloc 256 MiB", "cudaMemcpy round trip"):
        assert rows[step][-1] == "PASS", rows
    assert rows["libcudart"] == [f"libcudart.so.{runtime} (work-alike)", "PASS"]
    assert rows["devices"][0].startswith("1 x ")
    assert rows["cudaMalloc 256 MiB"][0] == "free -256 MiB"
    assert rows["Xid 79: next call"] == ["719 cudaErrorLaunchFailure", "PASS"]
    assert rows["reset"][-1] == "PASS" and rows["pod gone"][-1] == "PASS"
    assert rows["node nvidia-smi"][-1] == "PASS", rows
    assert rows["node nvidia-smi"][0].endswith(": 256 MiB")
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        assert rows["PyTorch"] == ["not installed", "SKIP"]
    else:
        assert rows["PyTorch"][-1] == "PASS", rows


def picked_by_the_demo_scenario(nodes: list[str]) -> list[str]:
    """What the protocol's selection picks for the demo's scenario over these nodes."""
    from nvml_mock_live.scenarios import parse_scenarios
    from nvml_mock_protocol.topology import parse_topology

    sys.path.insert(0, str(DEMO.parent))
    try:
        import run as demo
    finally:
        sys.path.remove(str(DEMO.parent))
    topology = parse_topology(demo.rebind_yaml(nodes))
    picked = parse_scenarios(demo.SCENARIO_YAML).select(topology)[demo.SCENARIO]
    assert len(picked) == 2
    return sorted(picked)


def test_plain_injection_on_a_non_fabric_profile(tmp_path: Path) -> None:
    done = _run(tmp_path, GPU_PROFILE="t4", WITH_COMPUTE_DOMAIN="false")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    inject = [row for row in _summary(done.stdout) if row[0] == "inject"]
    assert len(inject) == 4
    assert all(row[2] != "0" and row[3] == "-" and row[5] == "-" for row in inject)


def test_without_mount_namespaces_the_overlay_host_path_stands_in(tmp_path: Path) -> None:
    done = _run(tmp_path, GPU_PROFILE="gb300", GPU_COUNT="2", DEMO_MOUNT_NAMESPACES="false")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "mount namespaces are not permitted here (turned off" in done.stdout
    inject = [row for row in _summary(done.stdout) if row[0] == "inject"]
    assert [row[3] for row in inject] == ["0", "0", "1", "1"]
    assert all(row[2] == "2" for row in inject)


def test_a_foreign_work_directory_is_never_cleared(tmp_path: Path) -> None:
    foreign = tmp_path / "demo"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    done = _run(tmp_path, GPU_PROFILE="t4", WITH_COMPUTE_DOMAIN="false")
    assert done.returncode == 1
    assert "is not a previous demo's work directory" in done.stdout
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_bad_knob_is_refused_with_its_name(tmp_path: Path) -> None:
    done = _run(tmp_path, GPU_PROFILE="t4", WITH_COMPUTE_DOMAIN="true")
    assert done.returncode == 3
    assert "t4 is not fabric-attached" in done.stderr


@pytest.mark.parametrize("count", ["0", "65", "many"])
def test_bad_gpu_count_is_refused(tmp_path: Path, count: str) -> None:
    done = _run(tmp_path, GPU_COUNT=count)
    assert done.returncode == 3
    assert "GPU_COUNT" in done.stderr
