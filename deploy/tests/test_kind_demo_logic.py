"""The kind demo's own logic on a real run, with docker, kind, kubectl and helm played by a script.

There is no cluster here, so one small program answers as the four tools would for a
healthy demo cluster (and, per test, for a broken one). What is under test is run.sh's
side: which cluster path it takes, how it derives image tags, which pod it picks on a node
(never one still terminating), and that its assertions fail on wrong answers, naming the
node.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

RUN_SH = REPO_ROOT / "demo" / "kind" / "run.sh"
CLUSTER = "nvml-mock-node-wide-demo"
WORKERS = [f"{CLUSTER}-worker", f"{CLUSTER}-worker2", f"{CLUSTER}-worker3", f"{CLUSTER}-worker4"]
CLIQUES = dict(zip(WORKERS, [0, 0, 1, 1], strict=True))
UUID = "00000000-0000-0000-0000-0000000000cd"
IMAGE_ID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

FAKE = """
import os, sys
tool = sys.argv[1]
args = sys.argv[2:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join([tool, *args]) + "\\n")
env = os.environ.get
workers = env("FAKE_WORKERS").split()
def out(text):
    sys.stdout.write(text)
    sys.exit(0)
if tool == "kind":
    if args[:2] == ["get", "clusters"]:
        out(env("FAKE_CLUSTERS", ""))
    if args[:2] == ["get", "nodes"]:
        out("\\n".join([env("FAKE_CLUSTER") + "-control-plane", *workers]) + "\\n")
    sys.exit(0)
if tool == "docker":
    if args == ["--version"]:
        out(env("FAKE_DOCKER_VERSION", "Docker version 27.3.1, build ce12230") + "\\n")
    if args[:2] == ["buildx", "version"]:
        if env("FAKE_NO_BUILDX"):
            sys.stderr.write("docker: 'buildx' is not a docker command.\\n")
            sys.exit(1)
        out("github.com/docker/buildx v0.17.1 257815a\\n")
    if args[:2] == ["image", "inspect"]:
        out(env("FAKE_IMAGE_ID") + "\\n")
    if args[:1] == ["exec"] and args[2:4] == ["test", "-S"]:
        sys.exit(1 if args[1] in env("FAKE_NO_NRI", "").split() else 0)
    sys.exit(0)
if tool == "helm":
    sys.exit(0)
# kubectl: the kubeconfig query is the one call that needs no context.
if args[:2] == ["config", "get-contexts"]:
    out("kind-" + env("FAKE_CLUSTER") + "\\n")
assert args[:2] == ["--context", "kind-" + env("FAKE_CLUSTER")], args
args = args[2:]
if args[:1] == ["--namespace"]:
    args = args[2:]
if args[:2] == ["get", "namespace"]:
    out("namespace/" + args[2] + "\\n")
if args[:2] == ["get", "daemonset"]:
    out(env("FAKE_AGENT_SPEC", "{}||NODE_NAME"))
if args[:2] == ["get", "pods"] and "app.kubernetes.io/name=nvml-mock" in args:
    node = args[args.index("--field-selector") + 1].split("=")[1]
    out("nvml-mock-stage-" + node)
def flaky(kind):
    # the first FAKE_<KIND>_FAILS calls of this kind fail as a refused exec does
    fails = int(env("FAKE_" + kind + "_FAILS", "0"))
    counter = os.environ["FAKE_LOG"] + "." + kind
    seen = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(seen + 1))
    if seen < fails:
        sys.stderr.write("error: unable to upgrade connection: container not found\\n")
        sys.exit(1)
if args[:2] == ["exec", "deployment/demo-prometheus"]:
    flaky("PROM")
    query = args[-1]
    empty = any(word and word in query for word in env("FAKE_PROM_EMPTY", "").split(","))
    out('{"status":"success","data":{"result":[' + ("" if empty else '{"value":[1,"1"]}') + "]}}")
if args[:1] == ["exec"] and args[1].startswith("nvml-mock-stage-"):
    if "nvml-mock-ctl" in args:
        flaky("CTL")
    sys.exit(0)
def cuda_state():
    # the CUDA act's pod: "none" before it, "running", "after" (its go file touched), "gone"
    state = "none"
    with open(env("FAKE_LOG")) as calls:
        for line in calls:
            if "cuda-client.yaml" in line:
                state = "running"
            elif "exec cuda-client -- touch /tmp/go" in line:
                state = "after"
            elif "delete pod cuda-client --wait=true" in line and state != "none":
                state = "gone"
    return state
if args[:3] == ["get", "pod", "cuda-client"]:
    out(workers[0])
if args[:2] == ["logs", "cuda-client"]:
    import json
    def step(which, **fields):
        return "@@cuda@@ " + json.dumps({"step": which, **fields}) + "\\n"
    library = env("FAKE_CUDA_LIBRARY", "/opt/nvml-mock/lib/cuda-runtime/libcudart.so.13")
    text = "ERROR: ld.so: object ... cannot be preloaded: ignored.\\n"
    text += step("loaded", library=library, pid=7)
    text += step("count", count=int(env("FAKE_CUDA_COUNT", "1")), code=0, error="cudaSuccess")
    text += step("properties", name="NVIDIA GB200", uuid="GPU-0", code=0, error="cudaSuccess")
    text += step("malloc", bytes=268435456, code=0, error="cudaSuccess")
    text += step("round-trip", exact=env("FAKE_CUDA_INEXACT") is None, code=0, error="x")
    text += step("waiting")
    if cuda_state() == "after":
        code, error = env("FAKE_CUDA_AFTER", "719 cudaErrorLaunchFailure").split()
        text += step("after", code=int(code), error=error, string="unspecified launch failure")
        text += "cuda-client exited 0\\n"
    out(text)
if args[:2] == ["exec", "cuda-client"]:
    sys.exit(0)
if args[:2] == ["get", "pods"] and "app.kubernetes.io/component=staging" in args:
    node = args[args.index("--field-selector") + 1].split(",")[0].split("=")[1]
    out("nvml-mock-stager-" + node)
if args[:1] == ["exec"] and args[1].startswith("nvml-mock-stager-"):
    node = args[1][len("nvml-mock-stager-"):]
    assert args[2:5] == ["-c", "stage", "--"], args
    if "nvml-mock-ctl" in args:
        sys.exit(0)
    assert "--query-compute-apps=pid,used_memory" in args, args
    cuda = cuda_state()
    if cuda in ("running", "after") and node == workers[0]:
        out("" if env("FAKE_CUDA_UNPUBLISHED") else "4300, 64 MiB\\n4301, 256 MiB\\n")
    if cuda == "gone" and node == workers[0] and env("FAKE_CUDA_STALE"):
        out("4301, 256 MiB\\n")
    holders_gone = False
    with open(env("FAKE_LOG")) as calls:
        for line in calls:  # the last of the holders' apply and delete decides
            if "gpu-holder.yaml" in line or "delete daemonset gpu-holder" in line:
                holders_gone = "delete daemonset gpu-holder" in line
    if node in env("FAKE_STALE_ALLOCATIONS", "").split():
        out("4242, 20480 MiB\\n")
    if holders_gone or node in env("FAKE_NO_ALLOCATIONS", "").split():
        out("")
    out(env("FAKE_APPS", "4242, 20480 MiB") + "\\n")
if args[:2] == ["get", "pods"] and "--field-selector" in args:
    node = args[args.index("--field-selector") + 1].split(",")[0].split("=")[1]
    # A pod from before the restart, still terminating, is listed first.
    out("gpu-agent-old-" + node + " 2030-01-01T00:00:00Z\\ngpu-agent-new-" + node + " \\n")
if args[:2] == ["get", "pods"] and any("spec.nodeName" in a for a in args):
    out(" ".join(workers))
if args[:1] == ["exec"]:
    pod, command = args[1], args[3:]
    node = pod.split("-new-")[-1]
    assert pod.startswith("gpu-agent-new-"), "exec into a terminating pod: " + pod
    if command[:2] == ["nvidia-smi", "-L"]:
        gpus = 0 if node in env("FAKE_NO_GPUS", "").split() else 4
        out("".join("GPU %d: NVIDIA GB200 (UUID: GPU-%d)\\n" % (i, i) for i in range(gpus)))
    if command[:1] == ["check-fabric"]:
        expected = command[command.index("--expect-clique") + 1]
        clique = env("FAKE_CLIQUE_" + node.replace("-", "_"), expected)
        report = "Discovered 1 GPU(s)\\nGPU 0 (GPU-0)\\n  clusterUuid : " + env("FAKE_UUID") + "\\n"
        report += "  cliqueId    : " + clique + "\\n  state       : completed (3)\\n"
        sys.stdout.write(report)
        sys.exit(0 if clique == expected else 3)
sys.exit(0)
"""


@pytest.fixture
def fake_tools(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = tmp_path / "fake.py"
    program.write_text(FAKE)
    for tool in ("docker", "kind", "kubectl", "helm"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{program}" {tool} "$@"\n')
        script.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(tmp_path / "calls"),
        "FAKE_CLUSTER": CLUSTER,
        "FAKE_WORKERS": " ".join(WORKERS),
        "FAKE_IMAGE_ID": IMAGE_ID,
        "FAKE_UUID": UUID,
    }


def run(
    environ: dict[str, str], **env: str
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    result = subprocess.run(
        ["bash", str(RUN_SH)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = Path(environ["FAKE_LOG"])
    calls = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


def test_a_healthy_cluster_passes_every_check(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools)
    assert result.returncode == 0, result.stdout + result.stderr
    for node in WORKERS:
        assert f"    {node}: 4 GPU(s)" in result.stdout
        assert f"    {node}: clique {CLIQUES[node]}, cluster {UUID}" in result.stdout
    assert calls[0] == ["docker", "--version"]
    assert calls[1] == ["docker", "buildx", "version"]
    assert calls[3][:5] == ["kind", "create", "cluster", "--name", CLUSTER]
    assert "==> builder: Docker version 27.3.1, build ce12230 (buildx: true)" in result.stdout
    tag = "0.1.0-0123456789ab"
    loaded = [c[3] for c in calls if c[:3] == ["kind", "load", "docker-image"]]
    assert all(ref.endswith(f":{tag}") for ref in loaded), loaded
    install = next(c for c in calls if c[0] == "helm")
    assert f"image.tag={tag}" in install
    execs = [c for c in calls if c[0] == "kubectl" and "exec" in c and "default" in c]
    assert len(execs) == 9
    cuda = [c for c in execs if "cuda-client" in c]  # the CUDA act's, once its GPU is lost
    assert [c[-4:] for c in cuda] == [["cuda-client", "--", "touch", "/tmp/go"]]
    assert all("gpu-agent-new-" in " ".join(c) for c in execs if c not in cuda)
    # the metrics act: the faults through the first worker's staging pod, then Prometheus
    staged = [c for c in calls if "exec" in c and f"nvml-mock-stage-{WORKERS[0]}" in c]
    assert [c[c.index("--") + 1 : c.index("--") + 3] for c in staged] == [
        ["nvml-mock-ctl", "fail"],
        ["nvml-mock-ctl", "xid"],
        ["nvml-mock-ctl", "reset"],
    ]
    assert "alert GPUXidError firing:" in result.stdout
    execs = [c for c in calls if c[0] == "kubectl" and "exec" in c]
    agents = [c for c in execs if "gpu-agent-new-" in " ".join(c)]
    stagers = [c for c in execs if "nvml-mock-stager-" in " ".join(c)]
    others = [c for c in execs if c not in agents and c not in stagers]
    # each node's stager is asked twice: with its gpu-holder running, and after it went; the
    # CUDA act's node four more times: its use, the fault, the reset, no process after
    assert len(agents) == 8 and len(stagers) == 12, execs
    # the rest are the CUDA act's exec into its pod, and the metrics act's: its Prometheus
    # and the staging pods it injects faults in
    assert all(
        "deployment/demo-prometheus" in c
        or "cuda-client" in c
        or any(a.startswith("nvml-mock-stage-") for a in c)
        for c in others
    ), others
    for node in WORKERS:  # each node's own nvidia-smi, in its staging pod
        assert f"    {node}: 4242, 20480 MiB" in result.stdout
        assert f"    {node}: no compute process" in result.stdout


def test_an_existing_cluster_is_reused_when_it_has_nri(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools, FAKE_CLUSTERS=f"other\n{CLUSTER}\n")
    assert result.returncode == 0, result.stderr
    assert not [c for c in calls if c[:2] in (["kind", "create"], ["kind", "delete"])]
    probed = {c[2] for c in calls if c[:2] == ["docker", "exec"]}
    assert set(WORKERS) <= probed
    assert "reusing cluster" in result.stdout


def test_an_existing_cluster_without_nri_is_refused(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools, FAKE_CLUSTERS=f"{CLUSTER}\n", FAKE_NO_NRI=WORKERS[2])
    assert result.returncode == 1
    assert f"node {WORKERS[2]} has no NRI socket" in result.stderr
    assert "FORCE_RECREATE=true" in result.stderr
    assert not [c for c in calls if c[0] in ("helm",) or c[:2] == ["docker", "build"]]


def test_force_recreate_deletes_then_creates(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools, FAKE_CLUSTERS=f"{CLUSTER}\n", FORCE_RECREATE="true")
    assert result.returncode == 0, result.stderr
    kinds = [c[:2] for c in calls if c[0] == "kind" and c[1] in ("delete", "create")]
    assert kinds == [["kind", "delete"], ["kind", "create"]]


def test_a_wrong_clique_fails_naming_the_node(fake_tools: dict[str, str]) -> None:
    node = WORKERS[3]
    result, _ = run(fake_tools, **{f"FAKE_CLIQUE_{node.replace('-', '_')}": "0"})
    assert result.returncode == 1
    assert f"check-fabric on {node}" in result.stderr
    assert f"    {WORKERS[2]}: clique 1" in result.stdout


def test_a_wrong_cluster_uuid_fails(fake_tools: dict[str, str]) -> None:
    result, _ = run(fake_tools, FAKE_UUID="00000000-0000-0000-0000-0000000000ff")
    assert result.returncode == 1
    assert "does not report clusterUuid" in result.stderr


def test_a_pod_without_gpus_fails(fake_tools: dict[str, str]) -> None:
    result, _ = run(fake_tools, FAKE_NO_GPUS=WORKERS[1])
    assert result.returncode == 1
    assert "listed no GPU" in result.stderr and WORKERS[1] in result.stderr


def test_a_node_whose_nvidia_smi_lists_no_allocation_fails(fake_tools: dict[str, str]) -> None:
    """The chart once mounted the overlay read-only into the plugin, so no record was ever
    written: the demo asks each node's own nvidia-smi for its gpu-holder's process."""
    result, _ = run(fake_tools, FAKE_NO_ALLOCATIONS=WORKERS[2])
    assert result.returncode == 1
    assert f"nvidia-smi on {WORKERS[2]} lists no compute process of 20480 MiB" in result.stderr
    assert f"    {WORKERS[0]}: 4242, 20480 MiB" in result.stdout


def test_a_record_without_the_annotated_memory_fails(fake_tools: dict[str, str]) -> None:
    """The holder's gpu-memory annotation must take effect (a default share is not it)."""
    result, _ = run(fake_tools, FAKE_APPS="4242, 47367 MiB")
    assert result.returncode == 1
    assert "lists no compute process of 20480 MiB" in result.stderr
    assert "it listed: 4242, 47367 MiB" in result.stderr


def test_records_are_asked_for_again_once_the_holders_are_gone(
    fake_tools: dict[str, str],
) -> None:
    result, calls = run(fake_tools)
    assert result.returncode == 0, result.stderr
    delete = ["daemonset", "gpu-holder", "--wait=true"]
    deleted = calls.index(next(c for c in calls if c[-3:] == delete))
    # the next act's first call (a leftover cuda-client pod is deleted before the holders)
    cuda = next(i for i, c in enumerate(calls) if i > deleted and "cuda-client" in c)
    after = [c for c in calls[deleted:cuda] if "--query-compute-apps=pid,used_memory" in c]
    assert len(after) == len(WORKERS)
    assert f"    {WORKERS[3]}: no compute process" in result.stdout


def test_a_leftover_cuda_client_goes_before_the_holders_are_counted(
    fake_tools: dict[str, str],
) -> None:
    """A run that failed in the CUDA act leaves its pod running, recorded on its GPU: the
    next run's holder checks would count it as a record of a dead container."""
    result, calls = run(fake_tools)
    assert result.returncode == 0, result.stderr
    first = next(i for i, c in enumerate(calls) if c[-len(_LEFTOVER) :] == _LEFTOVER)
    holders = next(i for i, c in enumerate(calls) if "gpu-holder" in " ".join(c))
    assert first < holders


def test_a_record_left_after_its_container_went_fails(fake_tools: dict[str, str]) -> None:
    """On a real node the records written while the overlay was writable stayed after it
    went back read-only: every NVML client listed dead PIDs."""
    result, _ = run(fake_tools, FAKE_STALE_ALLOCATIONS=WORKERS[1])
    assert result.returncode == 1
    assert f"nvidia-smi on {WORKERS[1]} still lists 4242, 20480 MiB" in result.stderr


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ('{"limits":{"nvidia.com/gpu":"1"}}||NODE_NAME', "requests nvidia.com/gpu"),
        ('{}|[{"name":"x","hostPath":{"path":"/x"}}]|NODE_NAME', "has volumes"),
        ("{}||NODE_NAME MOCK_NVML_CONFIG", "sets MOCK_* env"),
    ],
)
def test_a_workload_that_asks_for_something_fails(
    fake_tools: dict[str, str], spec: str, needle: str
) -> None:
    result, _ = run(fake_tools, FAKE_AGENT_SPEC=spec)
    assert result.returncode == 1
    assert needle in result.stderr


def _metrics_ctl(calls: list[list[str]]) -> list[list[str]]:
    """The metrics act's nvml-mock-ctl calls (in the staging pods it finds by name; the CUDA
    act's go to its pod's node through the staging selector)."""
    return [
        c
        for c in calls
        if "nvml-mock-ctl" in c and any(a.startswith("nvml-mock-stage-") for a in c)
    ]


def test_the_metrics_act_waits_for_the_alert_and_fails_naming_it(
    fake_tools: dict[str, str],
) -> None:
    result, calls = run(fake_tools)
    assert result.returncode == 0, result.stderr
    ctl = [c[c.index("--") + 1 :] for c in _metrics_ctl(calls)]
    assert ctl[0][:3] == ["nvml-mock-ctl", "fail", "thermal"]
    assert any(
        c[1] == "nvml-mock-stage-" + WORKERS[0]
        for c in calls
        if c[:1] == ["kubectl"] and "exec" in c and "nvml-mock-ctl" in c
    ) or any("nvml-mock-stage-" + WORKERS[0] in c for c in calls)
    result, _ = run(fake_tools, FAKE_PROM_EMPTY="ALERTS", METRICS_WAIT_SECONDS="2")
    assert result.returncode != 0
    assert "alert GPUXidError firing: Prometheus never answered" in result.stderr


def test_the_metrics_act_retries_a_refused_exec(fake_tools: dict[str, str]) -> None:
    """A reused cluster under load refuses an exec now and then: the demo asks again."""
    result, calls = run(fake_tools, FAKE_PROM_FAILS="2", FAKE_CTL_FAILS="1")
    assert result.returncode == 0, result.stdout + result.stderr
    ctl = [c[c.index("--") + 1 : c.index("--") + 3] for c in _metrics_ctl(calls)]
    assert ctl == [
        ["nvml-mock-ctl", "fail"],
        ["nvml-mock-ctl", "fail"],
        ["nvml-mock-ctl", "xid"],
        ["nvml-mock-ctl", "reset"],
    ]
    assert "(the query failed; asking again)" in result.stdout
    assert "(failed, attempt 1 of 5; again in 2 s)" in result.stdout
    # past the attempts, it stops naming the command
    result, _ = run(fake_tools, FAKE_CTL_FAILS="9", EXEC_ATTEMPTS="2")
    assert result.returncode != 0
    assert "failed 2 times:" in result.stderr and "nvml-mock-ctl fail thermal" in result.stderr


def test_without_a_compute_domain_no_fabric_check(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools, GPU_PROFILE="h100")
    assert result.returncode == 0, result.stderr
    assert not [c for c in calls if "check-fabric" in c]
    install = next(c for c in calls if c[0] == "helm")
    assert "topology.enabled=false" in install


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FAKE_NO_BUILDX": "1"}, "has no BuildKit: 'docker buildx version' failed"),
        ({"DOCKER_BUILDKIT": "0"}, "DOCKER_BUILDKIT=0 forces Docker's legacy builder"),
        (
            {"FAKE_DOCKER_VERSION": "Docker version 20.10.24, build 297e128"},
            "Docker 20.10.24 is too old",
        ),
        (
            {"FAKE_DOCKER_VERSION": "podman version 4.3.1"},
            "podman before 4.4 cannot bind-mount a cached",
        ),
        ({"FAKE_DOCKER_VERSION": "nerdctl version 1.7.0"}, "cannot tell which builder 'docker' is"),
    ],
)
def test_a_builder_without_buildkit_is_refused_before_anything_runs(
    fake_tools: dict[str, str], env: dict[str, str], needle: str
) -> None:
    result, calls = run(fake_tools, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert needle in result.stderr
    assert "demo/kind/README.md" in result.stderr
    assert [c[0] for c in calls] == ["docker", "docker"], "nothing after the builder check"


@pytest.mark.parametrize(
    "version",
    [
        "Docker version 23.0.0, build e92dd87",
        "Docker version 28.0.1",
        "podman version 4.4.0",
        "podman version 5.2.2",
    ],
)
def test_builders_that_work_are_accepted(fake_tools: dict[str, str], version: str) -> None:
    result, calls = run(fake_tools, FAKE_DOCKER_VERSION=version)
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(c[:2] == ["docker", "build"] for c in calls)


_LEFTOVER = ["delete", "pod", "cuda-client", "--ignore-not-found", "--wait=true"]
"""Before the holders: a run that failed in the CUDA act left its pod running."""


def _cuda_calls(calls: list[list[str]]) -> list[list[str]]:
    """The CUDA act's calls (not the clean-up of an earlier run's pod before the holders)."""
    return [
        c
        for c in calls
        if c[0] == "kubectl"
        and any("cuda-client" in a for a in c)
        and c[-len(_LEFTOVER) :] != _LEFTOVER
    ]


def test_the_cuda_act_checks_the_program_then_fails_its_gpu(fake_tools: dict[str, str]) -> None:
    """After the holders went: the pod with the annotation, its program's view, the node's
    nvidia-smi listing its 256 MiB, Xid 79 on its GPU, its next call's error, reset, and no
    process once the pod is gone."""
    result, calls = run(fake_tools)
    assert result.returncode == 0, result.stderr
    node = WORKERS[0]
    assert "    cuda-client: 1 GPU (NVIDIA GB200), 256 MiB allocated, copies exact" in result.stdout
    assert f"    {node}: 4301, 256 MiB" in result.stdout
    assert "    cuda-client: next call after Xid 79: 719 cudaErrorLaunchFailure" in result.stdout
    assert f"    {node}: no compute process after the pod went" in result.stdout
    holders_gone = calls.index(next(c for c in calls if c[-3:-1] == ["daemonset", "gpu-holder"]))
    first = calls.index(_cuda_calls(calls)[0])
    assert first > holders_gone
    ctl = [
        c[c.index("--") + 1 :]
        for c in calls
        if "nvml-mock-ctl" in c and f"nvml-mock-stager-{node}" in c
    ]
    assert ctl == [
        ["nvml-mock-ctl", "fail", "fallen-off-bus", "-i", "0"],
        ["nvml-mock-ctl", "reset", "-i", "0"],
    ]
    touched = calls.index(next(c for c in calls if c[-2:] == ["touch", "/tmp/go"]))
    fault = calls.index(next(c for c in calls if "fallen-off-bus" in c))
    assert fault < touched
    created = next(c for c in calls if "create" in c and "configmap" in c)
    assert created[-1] == f"--from-file=cuda_client.py={REPO_ROOT}/demo/local/cuda_client.py"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"FAKE_CUDA_LIBRARY": "/usr/lib/libcudart.so.13"},
            "the CUDA program's libcudart is not the overlay's work-alike",
        ),
        ({"FAKE_CUDA_COUNT": "2"}, "cudaGetDeviceCount in pod cuda-client is not 1"),
        ({"FAKE_CUDA_INEXACT": "1"}, "cudaMemcpy there and back is not exact"),
        (
            {"FAKE_CUDA_UNPUBLISHED": "1"},
            "lists no process using 256 MiB: the CUDA program's use was not published",
        ),
        (
            {"FAKE_CUDA_AFTER": "0 cudaSuccess"},
            "after Xid 79 the CUDA program's next call answered 0 cudaSuccess, "
            "not 719 cudaErrorLaunchFailure",
        ),
        ({"FAKE_CUDA_STALE": "1"}, "its CUDA record was left behind"),
    ],
)
def test_the_cuda_act_fails_naming_what_is_wrong(
    fake_tools: dict[str, str], env: dict[str, str], message: str
) -> None:
    result, _ = run(fake_tools, WITH_COMPUTE_DOMAIN="false", **env)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_without_the_cuda_act_no_cuda_pod(fake_tools: dict[str, str]) -> None:
    result, calls = run(fake_tools, WITH_CUDA_ACT="false")
    assert result.returncode == 0, result.stderr
    assert _cuda_calls(calls) == []
    refused, _ = run(fake_tools, WITH_CUDA_ACT="yes")
    assert refused.returncode == 2
    assert "WITH_CUDA_ACT=yes must be true or false" in refused.stderr
