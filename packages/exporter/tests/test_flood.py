"""Hostile clients on the exporter's port, as an attacker runs them: real sockets against a
real exporter process, its memory read from the kernel while they hold on.

10,000 connections (idle ones, slowloris ones dribbling a header byte at a time, ones that
ask for ``/metrics`` and never read) must neither take the exporter past the chart's 128Mi
memory limit nor keep a scraper from being answered; a client that resets after its
request costs a debug line, never a traceback.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Exporter, get, parse

CHART_LIMIT = 128 * 1024 * 1024
FLOOD = 10_000


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _kib(value: str) -> int:
    return int(value.split(maxsplit=1)[0]) * 1024


@pytest.fixture
def many_files() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 500:
        pytest.skip(f"the open-files limit ({hard}) is below {FLOOD + 500}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _open(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        socks.append(sock)
    return socks


def _send(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.send(data)


def test_ten_thousand_idle_and_slow_connections_leave_metrics_answering_under_the_limit(
    run_exporter: Callable[..., Exporter], many_files: None
) -> None:
    exporter = run_exporter()
    pid = exporter.proc.pid
    idle = _open(exporter.port, FLOOD // 2)
    loris = _open(exporter.port, FLOOD // 4)
    readers = _open(exporter.port, FLOOD // 4)
    every = idle + loris + readers
    try:
        for sock in readers:
            _send(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        for sock in loris:
            _send(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        answered = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for sock in loris:
                _send(sock, b"X")  # one header byte at a time, never the blank line
            status, text = get(exporter.url + "/metrics", timeout=10)
            assert status == 200
            assert parse(text).of("DCGM_FI_DEV_GPU_TEMP", gpu="7")
            assert get(exporter.url + "/health", timeout=10)[0] == 200
            answered += 1
            time.sleep(0.5)
        assert exporter.proc.poll() is None
        seen = _status(pid)
        assert _kib(seen["VmHWM"]) < CHART_LIMIT, seen["VmHWM"]
        assert int(seen["Threads"]) < 16, seen["Threads"]
        assert answered >= 10
    finally:
        for sock in every:
            sock.close()
    # the flood gone, the exporter serves on as before
    assert get(exporter.url + "/metrics", timeout=10)[0] == 200


def test_a_client_that_resets_after_its_request_costs_no_traceback(
    run_exporter: Callable[..., Exporter],
) -> None:
    exporter = run_exporter("--log-level", "debug")
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", exporter.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        # RST on close: SO_LINGER on with a zero timeout
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    assert get(exporter.url + "/metrics")[0] == 200
    exporter.proc.terminate()
    assert exporter.proc.wait(timeout=20) == 0
    text = exporter.log.read_text()
    assert "Traceback" not in text
    records = exporter.logs()  # every line is JSON, as --log-format json asks
    assert not [r for r in records if r.get("level") in ("ERROR", "error", "CRITICAL")]


def test_a_request_head_without_end_is_closed_at_the_timeout(
    run_exporter: Callable[..., Exporter],
) -> None:
    exporter = run_exporter("--request-timeout", "1")
    sock = socket.create_connection(("127.0.0.1", exporter.port), timeout=10)
    sock.sendall(b"GET /metrics HTTP/1.1\r\n")
    started = time.monotonic()
    while True:
        _send(sock, b"X")
        try:
            sock.settimeout(0.2)
            if sock.recv(1) == b"":
                break
        except TimeoutError:
            pass
        except ConnectionResetError:
            break
        assert time.monotonic() - started < 10, "a dribbling client was never closed"
    sock.close()
    # an oversized head is refused outright
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as big:
        big.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 9000)
        assert big.recv(100).startswith(b"HTTP/1.1 400 ")


def _read_all(sock: socket.socket, *, pause: float = 0.0) -> bytes:
    chunks = []
    while True:
        data = sock.recv(4096)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        if pause:
            time.sleep(pause)


def test_a_slow_reader_and_a_half_closed_client_get_the_whole_answer(
    tmp_path: Path, run_exporter: Callable[..., Exporter]
) -> None:
    """The bounds cut off clients that make no progress, never an answer still being read:
    a 64-GPU node's text to a client reading 4 KiB at a time with `Connection: close`, and to
    one that half-closes after its request (as `nc` does)."""
    from conftest import render_node

    big = render_node(tmp_path / "big", count=64)
    exporter = run_exporter(on=big)
    exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="63"' in t)
    for request, half_close, pause in (
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False, 0.002),
        (b"GET /metrics HTTP/1.0\r\n\r\n", True, 0.0),
    ):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", exporter.port))
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = _read_all(sock, pause=pause)
        sock.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(next(h for h in head.split(b"\r\n") if h.startswith(b"Content-Length:"))[15:])
        assert length > 300_000
        assert len(body) == length
        assert parse(body.decode()).of("DCGM_FI_DEV_GPU_TEMP", gpu="63")
