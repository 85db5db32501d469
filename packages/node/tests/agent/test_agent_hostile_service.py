"""A service that answers too much, or not at all: the agent reads a bounded answer and
says in words what went wrong (it said "unreachable: None" for a slow service)."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from nvml_mock_engine.http_answers import ANSWER_MAX_BYTES, failure_reason
from nvml_mock_engine.settings import AgentSettings
from nvml_mock_node.agent import Agent
from test_agent import Clock

__all__: list[str] = []


class Flood:
    """A loopback server that answers every request with a 200 MB body, counting what it
    got to send before the client hung up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.recv(65536)
            size = 200 * 1024 * 1024
            head = (
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                f"content-length: {size}\r\n\r\n"
            )
            connection.sendall(head.encode())
            chunk = b" " * 65536
            try:
                while self.sent < size:
                    connection.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                return


@pytest.fixture
def flood() -> Iterator[Flood]:
    server = Flood()
    yield server
    server.listener.close()


def test_a_200_mb_answer_is_refused_after_the_limit(flood: Flood, tmp_path: Path) -> None:
    settings = AgentSettings(
        live_file=tmp_path / "live.nvmlmock",
        topology_url=flood.url,
        node="node-1",
        probe_addr=None,
    )
    agent = Agent(settings, clock=Clock(0))
    with pytest.raises(ValueError, match=f"larger than {ANSWER_MAX_BYTES} bytes"):
        agent.watch_once(0)
    flood.thread.join(10)
    # The agent stopped reading at the limit (what the kernel buffers comes on top).
    assert flood.sent < ANSWER_MAX_BYTES + 32 * 1024 * 1024
    status, body = agent.readiness()
    assert status == 503 and "larger than" in body["detail"]


def test_a_service_that_never_answers_is_said_to_time_out() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        with pytest.raises(OSError) as caught:
            urllib.request.urlopen(url, timeout=0.3)
        reason = failure_reason(caught.value, 0.3)
    assert reason == "no answer within 0.3 s (timed out)"
    assert failure_reason(urllib.error.URLError(None)) == "URLError (no detail given)"  # type: ignore[arg-type]
