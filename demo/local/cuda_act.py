"""The local demo's CUDA act: a pod's CUDA program on a mock GPU, through the NRI plugin.

A pod annotated ``nvml-mock.nvidia.com/cuda-runtime: "true"`` and given one GPU goes
through its node's NRI plugin like every other workload; the plugin's adjustment preloads the
overlay's CUDA runtime work-alike. Inside the pod's private mount namespace a small CUDA
program (``cuda_client.py``: NVIDIA's runtime API by ctypes, and PyTorch when the demo's
interpreter has it) sees its GPU, allocates 256 MiB and copies exactly. The node's
``nvidia-smi`` should list that allocation under the pod's process; then ``nvml-mock-ctl fail
fallen-off-bus`` on its GPU (Xid 79) makes the program's next CUDA call fail with the real
driver's error, and ``reset`` clears the GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import nvml_mock_live as live
from cluster import Node, wait_until
from nvml_mock_protocol import names
from workload import Isolation, create_and_run

CLIENT = Path(__file__).resolve().parent / "cuda_client.py"
MARK = "@@cuda@@"
ALLOCATION_MIB = 256
XID79_ERROR = (719, "cudaErrorLaunchFailure")
"""What the real driver answers a running program once its GPU fell off the bus (Xid 79):
``CUDA_ERROR_LAUNCH_FAILED``, which the runtime passes on as ``cudaErrorLaunchFailure`` (the
mapping and its source: the cuda package's README, "Faults reach CUDA")."""
PUBLISHED_FROM_CONTAINERS = True
"""Whether the node publishes a container's CUDA use into its live layer (the NRI plugin's
socket in the overlay, through which the mock libcuda in a pod, seeing the overlay read-only,
sends its use). When true the nvidia-smi step is asserted; when false it is reported as
skipped if nvidia-smi lists nothing for the pod."""
PLUGIN_RECORD_MIB = 64
PLUGIN_RECORD = f"{PLUGIN_RECORD_MIB}Mi"
"""The pod's ``gpu-memory`` annotation: what the plugin's own allocation record for the
container (under its first process's PID) says, told apart from the CUDA program's use."""


class _Demo(Protocol):
    work: Path
    overlay: Path
    nodes: list[Node]
    isolation: Isolation
    workloads: list[int]
    verdicts: Any

    def act(self, title: str) -> None: ...

    async def node_smi(self, *args: str) -> list[str]: ...

    async def node_smi_until(self, done: Callable[[list[str]], bool], *args: str) -> list[str]: ...


@dataclass
class CudaRow:
    """One line of the CUDA summary."""

    step: str
    seen: str
    verdict: str


def socket_server(path: Path) -> int | None:
    """The PID of the process serving the unix socket at *path* (the kernel's credentials of
    the listener), or None when nothing answers there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return None
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[0])


def serving_node(demo: _Demo) -> Node:
    """The node whose plugin serves the overlay's CUDA socket. The demo's nodes share one
    overlay, where each real node has its own: the plugin that started last holds the socket,
    and a pod's publication reaches only the plugin of its own node."""
    pid = socket_server(demo.overlay / names.OVERLAY_CUDA_SOCKET)
    for node in demo.nodes:
        if node.plugin is not None and node.plugin.proc.pid == pid:
            return node
    return demo.nodes[0]


def say(text: str) -> None:
    print(text, flush=True)


def steps(log: Path) -> dict[str, dict[str, Any]]:
    """The client's ``@@cuda@@`` lines so far, by step."""
    found: dict[str, dict[str, Any]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(MARK + " "):
            with contextlib.suppress(json.JSONDecodeError):
                record = json.loads(line[len(MARK) + 1 :])
                found[str(record.get("step"))] = record
    return found


def alive(pid: int) -> bool:
    """Whether *pid* still runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def ctl(demo: _Demo, node: Node, *args: str) -> int:
    """``nvml-mock-ctl`` on the node's live layer (the one the node's nvidia-smi and the
    pod's library read)."""
    config = demo.overlay / names.OVERLAY_CONFIG_DIR
    argv = [sys.executable, "-m", "nvml_mock_engine.ctl", "--live-file"]
    argv += [str(config / live.LIVE_FILE_NAME), "--state-file", str(config / names.STATE_FILE_NAME)]
    proc = await asyncio.create_subprocess_exec(
        *argv, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    say(f"  $ nvml-mock-ctl {' '.join(args)}   (on {node.name})")
    for line in out.decode(errors="replace").splitlines():
        say(f"      {line[:110]}")
    return int(proc.returncode or 0)


async def run_cuda_act(demo: _Demo) -> list[CudaRow]:
    """Run the act; its summary rows."""
    node = serving_node(demo)
    assert node.runtime is not None
    state = demo.overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME
    board = live.read_board(state)
    gpu = min(1, len(board) - 1)
    uuid = board[gpu].uuid
    demo.act(f"CUDA in a pod on {node.name}'s GPU {gpu} ({names.ANNOTATION_CUDA_RUNTIME})")
    v = demo.verdicts
    rows: list[CudaRow] = []

    def row(step: str, ok: bool, seen: str, verdict: str | None = None) -> None:
        rows.append(CudaRow(step, seen, verdict or ("PASS" if ok else "FAIL")))

    node_gpus = await demo.node_smi("--query-gpu=index,name,uuid", "--format=csv,noheader")
    name = next((ln.split(", ")[1] for ln in node_gpus if ln.startswith(f"{gpu}, ")), "?")
    go = demo.work / "cuda-go"
    go.unlink(missing_ok=True)
    log = node.workdir / "cuda-client.log"
    outcome = await create_and_run(
        node.runtime,
        node.name,
        demo.isolation,
        demo.overlay,
        name="cuda-client",
        started=demo.workloads,
        extra_env={names.ENV_NVIDIA_VISIBLE_DEVICES: str(gpu)},
        annotations={
            names.ANNOTATION_CUDA_RUNTIME: "true",
            names.ANNOTATION_GPU_MEMORY: PLUGIN_RECORD,
        },
        # the container's first process is a shell that runs the program as its child, as
        # many images' entry points do: the plugin records the shell's PID at start, and the
        # program, publishing its CUDA use, is found in the container as the shell's child
        command=f"{sys.executable} {CLIENT} {go}; exit $?",
        log=log,
    )
    assert outcome.pid is not None
    pid = outcome.pid
    runtime = node.runtime
    pod = runtime.pods[runtime.containers[outcome.container_id].pod_sandbox_id]
    # the runtime starts it: PostStartContainer gives the plugin the container's PID, by
    # which it knows the process that later publishes through its socket
    await runtime.start_container(pod, outcome.container_id, pid)
    mount = names.OVERLAY_MOUNT_PATH
    preload = ":".join(f"{mount}/{rel}" for rel in names.CUDA_RUNTIME_PRELOADS)
    ok = v.check(
        outcome.injected and outcome.env.get(names.ENV_LD_PRELOAD) == preload,
        f"{node.name}: the plugin's adjustment preloads the runtime work-alike: "
        f"LD_PRELOAD={outcome.env.get(names.ENV_LD_PRELOAD)}",
    )
    row("plugin: LD_PRELOAD", ok, "the overlay's work-alikes" if ok else "not set")
    try:
        with contextlib.suppress(TimeoutError):
            await wait_until(
                "the CUDA client to allocate",
                lambda: "waiting" in steps(log) or not alive(pid),
                60,
            )
        seen = steps(log)
        loaded = seen.get("loaded", {})
        library = str(loaded.get("library", ""))
        ok = v.check(
            library.endswith(names.CUDA_RUNTIME_PRELOADS),
            f"{outcome.pod}: the libcudart that answers is the overlay's work-alike: "
            f"{library or 'none'}",
        )
        row("libcudart", ok, library.rsplit("/", 1)[-1] + " (work-alike)" if ok else library or "-")
        count = seen.get("count", {})
        props = seen.get("properties", {})
        ok = v.check(
            count.get("count") == 1 and props.get("uuid") == uuid and props.get("name") == name,
            f"{outcome.pod}: cudaGetDeviceCount {count.get('count')}, device 0 is "
            f"{props.get('name')} {props.get('uuid')} (the node's GPU {gpu}: {name} {uuid})",
        )
        row("devices", ok, f"{count.get('count')} x {props.get('name')}")
        malloc = seen.get("malloc", {})
        drop = int(malloc.get("free_before", 0)) - int(malloc.get("free_after", 0))
        ok = v.check(
            malloc.get("code") == 0 and drop >= ALLOCATION_MIB << 20,
            f"{outcome.pod}: cudaMalloc {ALLOCATION_MIB} MiB: {malloc.get('error')}; "
            f"cudaMemGetInfo's free fell by {drop >> 20} MiB",
        )
        row("cudaMalloc 256 MiB", ok, f"free -{drop >> 20} MiB")
        trip = seen.get("round-trip", {})
        ok = v.check(
            trip.get("exact") is True,
            f"{outcome.pod}: cudaMemcpy of {int(trip.get('bytes', 0)) >> 20} MiB there and back "
            f"is exact ({trip.get('error')})",
        )
        row("cudaMemcpy round trip", ok, "exact" if ok else str(trip.get("exact")))
        torch = seen.get("torch", {})
        if torch.get("ran"):
            ok = v.check(
                torch.get("available") is True
                and torch.get("count") == 1
                and torch.get("name") == name
                and torch.get("exact") is True,
                f"{outcome.pod}: PyTorch {torch.get('version')}: {torch}",
            )
            row("PyTorch", ok, f"{torch.get('count')} x {torch.get('name')}")
        else:
            say(f"  [skip] PyTorch did not run: {torch.get('why', 'no report')}")
            row("PyTorch", True, "not installed", "SKIP")

        query = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader")

        program = int(loaded.get("pid", 0))

        def used(lines: list[str], who: int) -> int:
            """MiB nvidia-smi lists for process *who* on the pod's GPU."""
            rows = [ln.split(", ") for ln in lines if ln.startswith(f"{who}, ")]
            return sum(int(f[1].split()[0]) for f in rows if len(f) == 3 and f[2] == uuid)

        # the driver publishes at the allocation, before the client says it is waiting
        apps = await demo.node_smi(*query)
        mib = used(apps, program)
        if mib >= ALLOCATION_MIB or PUBLISHED_FROM_CONTAINERS:
            ok = v.check(
                program > 0 and mib >= ALLOCATION_MIB and used(apps, pid) == PLUGIN_RECORD_MIB,
                f"{node.name}: the node's nvidia-smi lists the pod's CUDA program {program} with "
                f"{mib} MiB on GPU {gpu} (at least its {ALLOCATION_MIB} MiB), beside the "
                f"container's first process {pid} with the plugin's {PLUGIN_RECORD} record",
            )
            row("node nvidia-smi", ok, f"pid {program}: {mib} MiB")
        else:
            say(
                f"  [skip] {node.name}: the node's nvidia-smi does not list the pod's CUDA "
                f"program {program}: not published from containers yet (a pod sees the overlay "
                "read-only)"
            )
            row("node nvidia-smi", True, "not published from containers yet", "SKIP")

        rc = await ctl(demo, node, "fail", "fallen-off-bus", "-i", str(gpu))
        v.check(rc == 0, f"{node.name}: nvml-mock-ctl fail fallen-off-bus -i {gpu} exits {rc}")
        go.write_text("go\n")
        with contextlib.suppress(TimeoutError):
            await wait_until(
                "the CUDA client's next call", lambda: "after" in steps(log) or not alive(pid), 20
            )
        after = steps(log).get("after", {})
        ok = v.check(
            (after.get("code"), after.get("error")) == XID79_ERROR,
            f"{outcome.pod}: its next cudaMemcpy after Xid 79 fails with {after.get('code')} "
            f"{after.get('error')}: {after.get('string')}",
        )
        row("Xid 79: next call", ok, f"{after.get('code')} {after.get('error')}")
        rc = await ctl(demo, node, "reset", "-i", str(gpu))
        ok = v.check(rc == 0, f"{node.name}: nvml-mock-ctl reset -i {gpu} exits {rc}")
        row("reset", ok, f"exit {rc}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        await runtime.stop_container(pod, runtime.containers[outcome.container_id])
        await runtime.remove_container(pod, outcome.container_id)
        say(f"  {node.name}: the pod is killed and removed")
        gone = await demo.node_smi_until(
            lambda lines: used(lines, program) == 0 and used(lines, pid) == 0, *query
        )
        ok = v.check(
            used(gone, program) == 0 and used(gone, pid) == 0,
            f"{node.name}: afterwards nvidia-smi lists neither process: {gone or 'none'}",
        )
        row("pod gone", ok, "no process listed" if ok else "still listed")
    finally:
        go.write_text("go\n")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        stored = runtime.containers.get(outcome.container_id)
        if stored is not None:
            await runtime.stop_container(pod, stored)
            await runtime.remove_container(pod, outcome.container_id)
        say(f"  client output: {log}")
    return rows


def cuda_table(rows: list[CudaRow], say: Callable[[str], None]) -> None:
    """The CUDA summary: STEP, SEEN, VERDICT."""
    table = [("STEP", "SEEN", "VERDICT")] + [(r.step, r.seen, r.verdict) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    for line in table:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
