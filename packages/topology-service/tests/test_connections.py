"""Connection limits against the real process over real sockets: slow, idle and surplus clients.

A client that drips its request a byte at a time is answered 408 and cut off
after ``--header-timeout``; an idle kept-alive connection is closed after
``--keep-alive-timeout``; past ``--max-connections`` requests are answered 503;
an oversized head is answered 431. None of this touches a watch that is waiting
for a change, however long it waits. Bounds below are generous (several times
the configured timeout): they tell "cut off" from "kept forever", nothing finer.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import document, serving

REQUEST = b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\nHost: t\r\n\r\n"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, int]]:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    limits = ("--header-timeout", "1", "--keep-alive-timeout", "1", "--max-connections", "20")
    with serving("--topology-file", str(path), *limits) as (_, url):
        yield url, int(url.rsplit(":", 1)[1])


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def drip(sock: socket.socket, data: bytes, deadline: float) -> bool:
    """Send ``data`` a byte every 0.1 s (looping); True once the server has closed on us."""
    sock.settimeout(0.1)
    position = 0
    while time.monotonic() < deadline:
        try:
            sock.sendall(data[position % len(data) :][:1])
        except (BrokenPipeError, ConnectionResetError):
            return True
        position += 1
        try:
            sock.recv(1, socket.MSG_PEEK)  # an answer, or the close, ends the drip
        except TimeoutError:
            continue
        return True
    return False


def test_a_slow_client_is_answered_408_and_cut_off(service: tuple[str, int]) -> None:
    url, port = service
    with connect(port) as slow:
        head = b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\nX-Slow: "
        closed = drip(slow, head, time.monotonic() + 15)
        assert closed, "a client dripping its headers was never cut off"
        slow.settimeout(5)
        answer = slow.recv(65536, socket.MSG_PEEK)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b"did not arrive within 1 seconds" in answer
    assert httpx.get(f"{url}/v1/nodes/worker-1/identity").status_code == 200


def test_many_slow_clients_are_all_cut_off_and_others_are_served(
    service: tuple[str, int],
) -> None:
    url, port = service
    slow = [connect(port) for _ in range(15)]
    try:
        for sock in slow:
            sock.sendall(b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\n")
        # Served meanwhile: a normal request does not wait for the slow ones.
        assert httpx.get(f"{url}/v1/nodes/worker-2/identity", timeout=5).status_code == 200
        for sock in slow:
            sock.settimeout(15)
            assert read_until_closed(sock).startswith(b"HTTP/1.1 408")
    finally:
        for sock in slow:
            sock.close()


def test_a_connection_that_sends_nothing_is_cut_off(service: tuple[str, int]) -> None:
    _, port = service
    with connect(port) as silent:
        silent.settimeout(15)
        assert read_until_closed(silent).startswith(b"HTTP/1.1 408")


def test_an_idle_kept_alive_connection_is_closed(service: tuple[str, int]) -> None:
    _, port = service
    with connect(port) as idle:
        idle.sendall(REQUEST)
        idle.settimeout(15)
        received = read_until_closed(idle)  # one answer, then the close after 1 s idle
    assert received.startswith(b"HTTP/1.1 200")
    assert received.count(b"HTTP/1.1") == 1


def test_past_the_connection_cap_requests_are_answered_503(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(document())
    limits = ("--header-timeout", "2", "--max-connections", "3")
    with serving("--topology-file", str(path), *limits) as (_, url):
        port = int(url.rsplit(":", 1)[1])
        held = [connect(port) for _ in range(3)]
        try:
            time.sleep(0.2)  # the server has accepted them
            with connect(port) as surplus:
                surplus.sendall(REQUEST)
                surplus.settimeout(10)
                assert surplus.recv(65536).startswith(b"HTTP/1.1 503")
            for sock in held:  # the held ones are cut off by the header timeout...
                sock.settimeout(15)
                read_until_closed(sock)
            # ...and then there is room again.
            assert httpx.get(f"{url}/v1/nodes/worker-1/identity").status_code == 200
        finally:
            for sock in held:
                sock.close()


def test_an_oversized_head_is_answered_431(service: tuple[str, int]) -> None:
    _, port = service
    with connect(port) as big:
        big.sendall(b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\nX-Big: " + b"a" * 100_000)
        big.settimeout(10)
        assert read_until_closed(big).startswith(b"HTTP/1.1 431")


def test_a_watch_outlives_both_timeouts(service: tuple[str, int]) -> None:
    url, _ = service
    with httpx.Client(base_url=url, timeout=20) as client:
        revision = client.get("/v1/nodes/worker-1/identity").json()["revision"]
        answers: list[httpx.Response] = []
        watcher = threading.Thread(
            target=lambda: answers.append(
                client.get(f"/v1/nodes/worker-1/identity?revision={revision}&wait=3")
            )
        )
        watcher.start()
        watcher.join(20)
    [answer] = answers  # the wait ran out (no change), and the connection was not cut
    assert answer.status_code == 200
    assert answer.json()["revision"] == revision


def test_a_whole_oversized_head_in_one_write_is_answered_431(service: tuple[str, int]) -> None:
    """A complete 100 KB head in one write was parsed and answered 200: the cap was
    counted only while a head was still incomplete."""
    _, port = service
    head = b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 100_000
    with connect(port) as big:
        big.sendall(head + b"\r\n\r\n")
        big.settimeout(10)
        assert read_until_closed(big).startswith(b"HTTP/1.1 431")
    # A head just under the cap, in one write and with its end straddling two writes.
    small = b"GET /v1/nodes/worker-1/identity HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
    padded = small + b"X-Pad: " + b"a" * 60_000 + b"\r\n\r\n"
    with connect(port) as fine:
        fine.sendall(padded)
        fine.settimeout(10)
        assert read_until_closed(fine).startswith(b"HTTP/1.1 200")
    with connect(port) as split:
        split.sendall(padded[:-1])
        time.sleep(0.1)
        split.sendall(padded[-1:])
        split.settimeout(10)
        assert read_until_closed(split).startswith(b"HTTP/1.1 200")
