"""Round-trip latency of the CUDA socket: one change of a process's use, published.

Stages a 4-GPU H100 overlay in a temporary directory, records a container holding GPU 0
whose process is this one, serves ``run/cuda.sock`` with the plugin's real publisher, and
times N sequential frames (``<uuid> <bytes>`` and the ``ok`` back; each one rewrites the
record in the live layer under the writers' lock), as the mock libcuda sends one per
allocation change. The baseline, in the same run, is the same exchange with a thread that
answers ``ok`` without looking: the unix socket and the thread hand-off alone.

    python bench/cuda_publish.py [--frames 5000]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from nvml_mock_engine.config import resolve_config
from nvml_mock_live import read_board
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri.adjust import Policy
from nvml_mock_nri.allocations import AllocationRecorder
from nvml_mock_nri.cuda_publish import CudaPublisher
from nvml_mock_nri.health import PluginState
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2 as api


def _echo(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        while data := conn.recv(4096):
            conn.sendall(b"ok\n" * data.count(b"\n"))


def _time(path: str, uuid: str, frames: int) -> list[float]:
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    took: list[float] = []
    with client:
        for i in range(frames):
            frame = f"{uuid} {(i % 7 + 1) << 20}\n".encode()
            start = time.perf_counter()
            client.sendall(frame)
            reply = client.recv(64)
            took.append(time.perf_counter() - start)
            assert reply == b"ok\n", reply
    return took


def _report(name: str, took: list[float], base: float | None = None) -> float:
    cuts = statistics.quantiles(took, n=100)
    p50, p99 = statistics.median(took), cuts[98]
    ratio = f"  x{p50 / base:.1f} baseline" if base else ""
    print(f"{name:44s} p50 {p50 * 1e6:8.1f} us  p99 {p99 * 1e6:8.1f} us{ratio}")
    return p50


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuda-pub-") as tmp:
        overlay = Path(tmp) / "overlay"
        config = resolve_config(profile="h100", node="node-a", count=4)
        stage(overlay, config, StageOptions(runtime=False))
        settings = load_settings(
            ["--overlay-host-path", str(overlay), "--host-proc-root", "/proc"], {}
        )
        recorder = AllocationRecorder(settings, Metrics(), PluginState())
        sandbox = api.PodSandbox(id="p" * 64, name="bench", namespace="default")
        container = api.Container(
            id="c" * 64,
            pod_sandbox_id=sandbox.id,
            name="main",
            env=["NVIDIA_VISIBLE_DEVICES=0"],
            pid=os.getpid(),
        )
        recorder.started(Policy.from_settings(settings), sandbox, container)
        uuid = read_board(overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME)[0].uuid

        echo_path = str(Path(tmp) / "echo.sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(echo_path)
        server.listen(1)
        thread = threading.Thread(target=_echo, args=(server,), daemon=True)
        thread.start()
        base = _report(
            "baseline: unix socket + answering thread", _time(echo_path, uuid, args.frames)
        )
        server.close()

        publisher = CudaPublisher(recorder, str(overlay), "/proc")
        publisher.start()
        try:
            path = str(overlay / names.OVERLAY_CUDA_SOCKET)
            _report(
                "publish: frame checked, record rewritten", _time(path, uuid, args.frames), base
            )
        finally:
            publisher.close()
            recorder.close()


if __name__ == "__main__":
    main()
