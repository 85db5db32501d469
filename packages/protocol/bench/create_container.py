"""Benchmark: CreateContainer round trips, runtime test double <-> plugin stub.

Measures what a container creation costs in NRI plumbing: the runtime double
sends CreateContainer over a unix socket, the stub decodes it, a plugin
returns a typical adjustment (env, a read-only bind mount, a device), and the
double decodes and merges the reply. The plugin runs in a child process by
default, as it does on a node.

Baseline, measured in the same run and shape: a bare asyncio echo of a
payload of the same size over a unix socket, the floor any Python NRI
transport sits on. Prints p50/p99 in microseconds and the ratios.

    python packages/protocol/bench/create_container.py [--calls 5000] [--same-process]
        [--coroutine]

The plugin's handler is a plain method, which the stub answers on its connection
thread; ``--coroutine`` makes it ``async def`` (answered through the event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nvml_mock_protocol.nri import Event, Plugin, RuntimeDouble, Stub
from nvml_mock_protocol.nri import api_pb2 as api

WARMUP = 200


class BenchPlugin(Plugin):
    events = frozenset({Event.CREATE_CONTAINER})

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        adjust = api.ContainerAdjustment(
            env=[
                api.KeyValue(key="NODE_NAME", value="node-a"),
                api.KeyValue(key="LD_LIBRARY_PATH", value="/opt/nvml-mock/lib"),
                api.KeyValue(key="PATH", value="/opt/nvml-mock/bin:/usr/bin"),
            ],
            mounts=[
                api.Mount(
                    destination="/opt/nvml-mock",
                    type="bind",
                    source="/var/lib/nvml-mock",
                    options=["rbind", "ro"],
                )
            ],
        )
        adjust.linux.devices.add(path="/dev/nvidia0", type="c", major=195, minor=0)
        return adjust


class CoroutineBenchPlugin(BenchPlugin):
    async def create_container(  # type: ignore[override]
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        return BenchPlugin.create_container(self, pod, container)


def make_pod_and_container(i: int) -> tuple[api.PodSandbox, api.Container]:
    pod = api.PodSandbox(
        id=f"sandbox-{i}",
        name=f"workload-{i}",
        uid=f"0f0e0d0c-{i:04d}",
        namespace="default",
        labels={"app": "workload", "pod-template-hash": "5d4f8c7b9"},
        annotations={"kubernetes.io/config.source": "api"},
    )
    container = api.Container(
        id=f"{i:064x}",
        pod_sandbox_id=pod.id,
        name="main",
        args=["python", "-m", "http.server"],
        env=["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8"],
        mounts=[
            api.Mount(destination="/etc/hosts", type="bind", source="/k/h", options=["rbind"]),
            api.Mount(destination="/dev/termination-log", type="bind", source="/k/t"),
        ],
    )
    return pod, container


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _plugin_main(path: str, coroutine: bool) -> None:
    plugin = CoroutineBenchPlugin() if coroutine else BenchPlugin()
    stub = Stub(plugin, name="bench", index="10", socket_path=path)
    await stub.run()


def _plugin_process(path: str, coroutine: bool) -> None:
    logging.basicConfig(level=logging.ERROR)  # the disconnect at the end is expected
    asyncio.run(_plugin_main(path, coroutine))


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
    writer.close()


async def _echo_main(path: str) -> None:
    server = await asyncio.start_unix_server(_echo, path)
    async with server:
        await server.serve_forever()


def _echo_process(path: str) -> None:
    asyncio.run(_echo_main(path))


async def bench_nri(
    path: Path, calls: int, same_process: bool, coroutine: bool
) -> tuple[list[float], int, int]:
    async with RuntimeDouble(path, request_timeout=5.0) as runtime:
        process = None
        task = None
        if same_process:
            task = asyncio.create_task(_plugin_main(str(path), coroutine))
        else:
            process = multiprocessing.get_context("spawn").Process(
                target=_plugin_process, args=(str(path), coroutine), daemon=True
            )
            process.start()
        await runtime.wait_for_plugins(1, timeout=30)
        pod, container = make_pod_and_container(0)
        request_size = api.CreateContainerRequest(pod=pod, container=container).ByteSize()
        samples: list[float] = []
        reply_size = 0
        for i in range(WARMUP + calls):
            pod, container = make_pod_and_container(i)
            start = time.perf_counter_ns()
            result = await runtime.create_container(pod, container)
            elapsed = time.perf_counter_ns() - start
            if i >= WARMUP:
                samples.append(elapsed / 1000)
            reply_size = result.adjustment.ByteSize()
            runtime.containers.clear()
        if task is not None:
            for plugin in runtime.plugins:
                plugin.connection.close("benchmark done")
            await task
    if process is not None:
        process.join(10)
    return samples, request_size, reply_size


async def bench_echo(path: Path, calls: int, size: int, same_process: bool) -> list[float]:
    process = None
    server = None
    if same_process:
        server = await asyncio.start_unix_server(_echo, str(path))
    else:
        process = multiprocessing.get_context("spawn").Process(
            target=_echo_process, args=(str(path),), daemon=True
        )
        process.start()
    for _ in range(300):
        if path.exists():
            break
        await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_unix_connection(str(path))
    payload = b"x" * size
    samples: list[float] = []
    for i in range(WARMUP + calls):
        start = time.perf_counter_ns()
        writer.write(payload)
        await reader.readexactly(size)
        elapsed = time.perf_counter_ns() - start
        if i >= WARMUP:
            samples.append(elapsed / 1000)
    writer.close()
    await writer.wait_closed()
    if server is not None:
        server.close()
        await server.wait_closed()
    if process is not None:
        process.terminate()
        process.join(10)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument(
        "--same-process", action="store_true", help="run the plugin in the same event loop"
    )
    parser.add_argument(
        "--coroutine", action="store_true", help="an async def handler (through the loop)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the plugin's disconnect warning is expected
    with tempfile.TemporaryDirectory(prefix="nri-bench-", dir="/tmp") as tmp:
        nri, request_size, reply_size = asyncio.run(
            bench_nri(Path(tmp) / "nri.sock", args.calls, args.same_process, args.coroutine)
        )
        echo = asyncio.run(
            bench_echo(Path(tmp) / "echo.sock", args.calls, request_size, args.same_process)
        )
    mode = "same process" if args.same_process else "plugin in a child process"
    mode += ", async def handler" if args.coroutine else ", plain handler"
    print(
        f"CreateContainer round trips: {args.calls} calls ({mode}), python {sys.version.split()[0]}"
    )
    print(f"request {request_size} B, adjustment {reply_size} B")
    print(f"{'':28}{'p50 us':>10}{'p99 us':>10}{'mean us':>10}")
    for name, samples in (("NRI CreateContainer", nri), ("baseline: unix-socket echo", echo)):
        print(
            f"{name:28}{percentile(samples, 0.5):10.1f}{percentile(samples, 0.99):10.1f}"
            f"{statistics.fmean(samples):10.1f}"
        )
    print(
        f"ratio NRI/baseline: p50 {percentile(nri, 0.5) / percentile(echo, 0.5):.2f}x, "
        f"p99 {percentile(nri, 0.99) / percentile(echo, 0.99):.2f}x"
    )
    print("targets: p50 <= 200 us, p99 <= 1000 us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
