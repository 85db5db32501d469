"""Publishing for CUDA processes in containers, through the real plugin's socket.

The plugin runs for real against the runtime double; its socket is the overlay's
``run/cuda.sock``. Clients are processes of their own: the real mock libcuda in a private
mount namespace that sees the overlay read-only (as a container does), and raw socket
clients for the hostile cases. NVML in yet another process reads the result.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import Start, allocated, pod, run_container, settled
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.mig_layout import parse_spec
from nvml_mock_live import read_board
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri.allocations import RECORDS_PER_POD, Grant
from nvml_mock_nri.cuda_publish import container_of
from nvml_mock_protocol import names
from nvml_mock_protocol.nri.runtime import RuntimeDouble
from test_allocations import nvml_view, overlay  # noqa: F401 - the fixture
from test_mig_allocations import LAYOUT
from test_mig_allocations import nvml_view as mig_view

GiB = 1 << 30


async def _until(check: object, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await asyncio.to_thread(check):  # type: ignore[arg-type]
            return
        assert loop.time() < deadline, "not reached in time"
        await asyncio.sleep(0.1)


def _end(client: subprocess.Popen[str]) -> None:
    if client.poll() is None:
        client.kill()
    client.wait()
    for pipe in (client.stdin, client.stdout, client.stderr):
        if pipe is not None:
            pipe.close()


def _procs(root: Path, gpu: int) -> list[list[int]]:
    return nvml_view(root)[str(gpu)]["procs"]  # type: ignore[index, no-any-return]


CUDA_CLIENT = textwrap.dedent(
    """
    import ctypes, errno, os, sys, time
    live = sys.argv[1]
    try:
        open(live, "r+b")
        print("writable", flush=True)
    except OSError as exc:
        print("live file:", errno.errorcode[exc.errno], flush=True)
    sys.stdin.readline()  # the runtime has recorded this container
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_ulonglong()
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(3 << 30)) == 0
    print("allocated", flush=True)
    time.sleep(120)
    """
)


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root")
async def test_container_process_publishes_through_a_read_only_overlay(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Path,  # noqa: F811
) -> None:
    from nvml_mock_cuda.library import driver_path

    # the driver finds the socket by the protocol's names
    built = driver_path().read_bytes()
    assert names.OVERLAY_CUDA_SOCKET.encode() in built
    assert names.ENV_MOCK_CUDA_PUBLISH_SOCKET.encode() in built
    await start_plugin("--overlay-host-path", str(overlay), "--host-proc-root", "/proc")
    assert (overlay / names.OVERLAY_CUDA_SOCKET).is_socket()
    config = overlay / names.OVERLAY_CONFIG_DIR
    env = {
        "PATH": os.environ["PATH"],
        "LD_LIBRARY_PATH": f"{driver_path().parent}:{overlay / names.OVERLAY_LIB_DIR}",
        "MOCK_NVML_CONFIG": str(config / names.STATE_FILE_NAME),
        "NVIDIA_VISIBLE_DEVICES": "2",
        "PYTHONUNBUFFERED": "1",
    }
    ro = f"mount --bind {overlay} {overlay} && mount -o remount,bind,ro {overlay} && exec "
    script = ro + f'{sys.executable} -c "$0" {config / names.LIVE_FILE_NAME}'
    client = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, CUDA_CLIENT],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None and client.stdin is not None
        assert client.stdout.readline().strip() == "live file: EROFS"
        sandbox = pod("train")
        await run_container(runtime, sandbox, allocated("main", sandbox, gpus="2"), client.pid)
        client.stdin.write("go\n")
        client.stdin.flush()
        line = await asyncio.to_thread(client.stdout.readline)
        assert line.strip() == "allocated", client.stderr.read() if client.stderr else ""
        # the runtime's record of the container (its share) and the CUDA process, by host PID
        await _until(lambda: [client.pid, 3 * GiB] in _procs(overlay, 2))
        assert all(p[0] != client.pid for p in _procs(overlay, 0))
        client.send_signal(signal.SIGKILL)
        client.wait()
        await _until(lambda: all(p[1] != 3 * GiB for p in _procs(overlay, 2)))
    finally:
        _end(client)


RAW_CLIENT = textwrap.dedent(
    """
    import socket, sys
    path = sys.argv[1]
    conns = {}
    for line in sys.stdin:
        name, _, frame = line.rstrip("\\n").partition(" ")
        if name not in conns:
            conns[name] = socket.socket(socket.AF_UNIX)
            conns[name].connect(path)
        s = conns[name]
        s.sendall(bytes.fromhex(frame))
        reply = s.recv(4096).decode()
        if reply.startswith("error"):
            closed = s.recv(16) == b""
            reply = reply.strip() + (" [closed]" if closed else "")
        print(reply.strip(), flush=True)
    """
)


async def test_hostile_peer_is_refused_and_broken_frames_close_one_connection(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Path,  # noqa: F811
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--host-proc-root", "/proc")
    board = read_board(overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME)
    total = board[2].memory_total_bytes
    client = subprocess.Popen(
        [sys.executable, "-c", RAW_CLIENT, str(overlay / names.OVERLAY_CUDA_SOCKET)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None and client.stdout is not None

    def ask(conn: str, frame: bytes) -> str:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(f"{conn} {frame.hex()}\n")
        client.stdin.flush()
        return client.stdout.readline().strip()

    try:
        # before the runtime recorded its container, the process holds nothing
        reply = await asyncio.to_thread(ask, "a", f"{board[2].uuid} 1024\n".encode())
        assert reply == "refused: the process is in no container holding GPUs"
        sandbox = pod("tenant")
        cid = await run_container(
            runtime, sandbox, allocated("main", sandbox, gpus="2"), client.pid
        )
        # judged again once the runtime recorded it, without a new frame: a process sends
        # only on a change, and may have allocated before PostStartContainer
        await _until(lambda: [client.pid, 1024] in _procs(overlay, 2))
        # and the same connection publishes from now on
        assert await asyncio.to_thread(ask, "a", f"{board[2].uuid} 1024\n".encode()) == "ok"
        assert await asyncio.to_thread(ask, "a", f"{board[2].uuid} 0\n".encode()) == "ok"
        assert await asyncio.to_thread(ask, "b", f"{board[2].uuid} 1024\n".encode()) == "ok"
        # a GPU it was not given: refused, nothing written there
        reply = await asyncio.to_thread(ask, "b", f"{board[0].uuid} 1024\n".encode())
        assert reply.startswith("refused:") and "was not given" in reply
        reply = await asyncio.to_thread(ask, "b", f"{board[2].uuid} {total + 1}\n".encode())
        assert reply.startswith("refused:") and "more than" in reply
        assert all(p[0] != client.pid for p in _procs(overlay, 0))
        # garbage closes that connection only
        reply = await asyncio.to_thread(ask, "c", b"\x00\xffGPU-garbage 12\n")
        assert reply.startswith("error:") and reply.endswith("[closed]")
        reply = await asyncio.to_thread(ask, "d", b"x" * 300)
        assert reply.startswith("error:") and reply.endswith("[closed]")
        assert await asyncio.to_thread(ask, "b", f"{board[2].uuid} 2048\n".encode()) == "ok"
        await _until(lambda: [client.pid, 2048] in _procs(overlay, 2))
        # at most RECORDS_PER_POD records per container, over all its connections
        for n in range(RECORDS_PER_POD - 1):
            reply = await asyncio.to_thread(ask, f"many{n}", f"{board[2].uuid} 4096\n".encode())
            assert reply == "ok"
        reply = await asyncio.to_thread(ask, "last", f"{board[2].uuid} 4096\n".encode())
        assert reply == f"refused: the container holds {RECORDS_PER_POD} records already"
        # a zero removes the record
        assert await asyncio.to_thread(ask, "b", f"{board[2].uuid} 0\n".encode()) == "ok"
        await _until(lambda: [client.pid, 2048] not in _procs(overlay, 2))
        # a stopped container holds nothing: its processes publish nothing more
        await runtime.stop_container(sandbox, runtime.containers[cid])
        await settled(runtime, sandbox)
        reply = await asyncio.to_thread(ask, "b", f"{board[2].uuid} 4096\n".encode())
        assert reply == "refused: the process's container holds no GPU any more"
    finally:
        _end(client)
    assert json.dumps(_procs(overlay, 0))  # NVML still reads the file after all of it


@pytest.fixture
def mig_overlay(short_tmp: Path) -> Path:
    """A staged four-GPU H100 overlay whose GPU 1 holds two 1g.10gb and one 3g.40gb."""
    root = short_tmp / "mig-overlay"
    config = resolve_config(profile="h100", node="node-a", count=4)
    plan = parse_spec(LAYOUT, config.profile.mig, config.count)
    stage(root, config, StageOptions(runtime=False, devices=False, imex_channels=0, mig=plan))
    return root


async def test_a_mig_device_is_published_on_its_parent_and_only_the_one_given(
    runtime: RuntimeDouble, start_plugin: Start, mig_overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(mig_overlay), "--host-proc-root", "/proc")
    devices = mig_view(mig_overlay)["devices"]
    assert isinstance(devices, list) and len(devices) == 3
    (mine, gi, ci, _), (other, *_) = devices[0], devices[1]
    client = subprocess.Popen(
        [sys.executable, "-c", RAW_CLIENT, str(mig_overlay / names.OVERLAY_CUDA_SOCKET)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ask(frame: bytes) -> str:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(f"a {frame.hex()}\n")
        client.stdin.flush()
        return client.stdout.readline().strip()

    try:
        sandbox = pod("infer")
        await run_container(runtime, sandbox, allocated("main", sandbox, gpus=mine), client.pid)
        # bounded by the MIG device's memory (at most 4 slices of 8 here), not its GPU's
        reply = await asyncio.to_thread(ask, f"{mine} {(81559 << 20) // 2 + 1}\n".encode())
        assert reply.startswith("refused:") and "more than" in reply
        assert await asyncio.to_thread(ask, f"{mine} {1 << 30}\n".encode()) == "ok"
        await _until(lambda: [client.pid, 1 << 30, gi, ci] in mig_view(mig_overlay)["procs"])
        reply = await asyncio.to_thread(ask, f"{other} {1 << 30}\n".encode())
        assert reply.startswith("refused:") and "was not given" in reply
    finally:
        _end(client)
    await _until(lambda: [client.pid, 1 << 30, gi, ci] not in mig_view(mig_overlay)["procs"])


def test_a_peer_is_found_by_its_cgroup_then_by_its_ancestors(tmp_path: Path) -> None:
    """A process ``kubectl exec`` started is no child of the container's process: its cgroup
    (containerd's, systemd driver) names the container. A process that left its cgroup is
    followed up the process tree; one of neither is in no container."""
    cid = "ab" * 32
    grant = Grant(cid, 100, "p", "default", frozenset({2}), frozenset())
    grants = {cid: grant}

    def proc(pid: int, ppid: int, cgroup: str) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py (x) y) S {ppid} 1 1\n")

    proc(100, 50, "0::/\n")
    proc(300, 7, f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{cid}.scope\n")
    proc(301, 100, "0::/elsewhere\n")
    proc(302, 301, "0::/elsewhere\n")
    proc(400, 1, "0::/system.slice/x.service\n")
    proc(401, 400, f"0::/kubepods.slice/cri-containerd-{'cd' * 32}.scope\n")
    assert container_of(300, grants, str(tmp_path)) is grant
    assert container_of(302, grants, str(tmp_path)) is grant
    assert container_of(400, grants, str(tmp_path)) is None
    assert container_of(401, grants, str(tmp_path)) is None
    assert container_of(999, grants, str(tmp_path)) is None
