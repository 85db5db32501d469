"""Liveness, readiness and metrics over HTTP, answered from a thread of their own.

NRI fails open: a plugin that is not registered, or that the runtime dropped after
a timeout, simply stops being called, and containers start without the overlay.
The probes make that visible. ``/readyz`` is 200 only while the plugin is
registered, has answered Synchronize, is not wedged and (when a topology service
is configured) knows its node's identity; otherwise 503 with the reason, so the
DaemonSet shows the node as not ready instead of lying quietly. ``/healthz`` is 503
only when wedged. Being unregistered is not a liveness failure; the process exits
on its own when the runtime connection ends.

Wedged means either of two things, past the wedge threshold (``--wedge-threshold``;
by default twice the request timeout the runtime sent in Configure, when the
runtime has given up on a call for a while already):

* the oldest CreateContainer still being answered is older than the threshold;
* the event loop has not run its heartbeat for longer than the threshold. The loop
  refreshes :attr:`PluginState.heartbeat` every fraction of the threshold. The
  runtime's container calls are answered on the NRI connection's own thread and go on,
  but a loop that stopped (a blocking call, a deadlock, a stuck main thread) no longer
  watches the node identity, answers no Configure and does not act on a lost
  connection or SIGTERM, yet nothing on the loop can report it. The probes, in their
  own thread, read the heartbeat's age instead.

The server runs in a thread, not on the event loop that answers the runtime: a
handler that blocks the loop is exactly the case ``/healthz`` must still report.
A probe client that hangs up before its answer (kubelet gives up after its probe
timeout) is one debug line, never a traceback on stderr.
"""

from __future__ import annotations

import itertools
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from nvml_mock_protocol.hostgpu import HostDriver

from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.settings import DEFAULT_REQUEST_TIMEOUT

logger = logging.getLogger(__name__)

WEDGE_FACTOR: Final = 2.0
"""Default wedge threshold, in request timeouts (when ``--wedge-threshold`` is not set)."""
HEARTBEAT_INTERVAL: Final = 0.25
"""Longest pause, in seconds, between two heartbeats of a live loop."""
HEARTBEAT_SHARE: Final = 0.25
"""The heartbeat runs at least this often per wedge threshold (so a short one still works)."""
SHUTDOWN_POLL: Final = 0.1
"""Seconds between the listener thread's checks for shutdown (bounds the stop time)."""
METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One probe answer: healthy or not, and why."""

    ok: bool
    reason: str


class PluginState:
    """What the probes read: connection state and in-flight CreateContainer calls.

    Written from the NRI connection's thread, read from the health thread. The in-flight
    table takes no lock: each write is one dict operation and each read one C-level pass
    (``len``, ``min``), all atomic under the GIL; a lock per call cost some 3 µs of a cached
    CreateContainer, with the caches cold as they are between two containers.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight: dict[int, float] = {}
        self._tokens = itertools.count()
        self.registered = False
        self.synchronized = False
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.wedge_override: float | None = None
        """``--wedge-threshold`` when set; None derives the threshold from the request timeout."""
        self.heartbeat: float | None = None
        """When the event loop last ran its heartbeat; None until the heartbeat starts."""
        self.identity_check: Callable[[], Verdict] | None = None
        """Set when a topology service is configured: whether the identity is known."""
        self.host_driver: HostDriver | None = None
        """The last real-driver check; a driver found is a detail of /readyz, not a failure."""
        self.allocation_problem: str | None = None
        """Why allocation records cannot be written now; a note on /readyz, not a failure
        (containers still get the overlay)."""

    def begin(self) -> int:
        """Record the start of a call; pass the token to :meth:`end`."""
        token = next(self._tokens)
        self._in_flight[token] = self._clock()
        return token

    def end(self, token: int) -> None:
        """Record the end of a call."""
        self._in_flight.pop(token, None)

    def in_flight(self) -> int:
        """How many calls are being answered."""
        return len(self._in_flight)

    def oldest_age(self) -> float | None:
        """Seconds since the oldest in-flight call began, or None when idle."""
        first = min(self._in_flight.values(), default=None)
        return None if first is None else self._clock() - first

    def beat(self) -> None:
        """Record that the event loop is running (called from the loop only)."""
        self.heartbeat = self._clock()

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats: often enough for the threshold to be seen in time."""
        return min(HEARTBEAT_INTERVAL, HEARTBEAT_SHARE * self.wedge_threshold)

    def loop_lag(self) -> float | None:
        """Seconds since the loop's last heartbeat; None before the heartbeat started."""
        beat = self.heartbeat
        return None if beat is None else max(0.0, self._clock() - beat)

    def loop_stalled(self) -> bool:
        """Whether the event loop has missed its heartbeat for longer than the threshold."""
        lag = self.loop_lag()
        return lag is not None and lag > self.wedge_threshold

    @property
    def wedge_threshold(self) -> float:
        """Seconds after which an in-flight call or a silent loop means the plugin is wedged."""
        if self.wedge_override is not None:
            return self.wedge_override
        return WEDGE_FACTOR * self.request_timeout

    def _threshold_text(self) -> str:
        limit = self.wedge_threshold
        if self.wedge_override is not None:
            return f"the {limit:.1f}s threshold (--wedge-threshold)"
        return f"the {limit:.1f}s threshold ({WEDGE_FACTOR:g} x the runtime's request timeout)"

    def wedged(self) -> Verdict | None:
        """A failing verdict when wedged, else None."""
        limit = self.wedge_threshold
        age = self.oldest_age()
        if age is not None and age > limit:
            return Verdict(
                False,
                f"wedged: a container request has been in flight for {age:.1f}s, past "
                f"{self._threshold_text()}",
            )
        lag = self.loop_lag()
        if lag is not None and lag > limit:
            return Verdict(
                False,
                f"wedged: the event loop has not run for {lag:.1f}s, past "
                f"{self._threshold_text()}; the node identity is no longer kept current and a "
                "lost runtime connection does not end the plugin",
            )
        return None

    def liveness(self) -> Verdict:
        """The /healthz verdict."""
        return self.wedged() or Verdict(True, "ok")

    def readiness(self) -> Verdict:
        """The /readyz verdict, first failing condition first, with the device-boundary note.

        A real driver does not make the plugin unready (the overlay is still injected);
        it is named in the body so that an operator sees why opted-in pods get no devices
        or IMEX channels.
        """
        verdict = self._readiness()
        notes = []
        driver = self.host_driver
        if driver is not None and driver.present:
            notes.append(f"device nodes and IMEX channels refused: {driver.reason}")
        if self.allocation_problem:
            notes.append(self.allocation_problem)
        if not notes:
            return verdict
        note = "; ".join(notes)
        if verdict.reason == "ok":
            return Verdict(verdict.ok, f"ok ({note})")
        return Verdict(verdict.ok, f"{verdict.reason}; {note}")

    def _readiness(self) -> Verdict:
        if not self.registered:
            return Verdict(
                False,
                "not registered with the container runtime; new containers are not being injected",
            )
        if not self.synchronized:
            return Verdict(False, "registered but the runtime has not synchronized yet")
        wedged = self.wedged()
        if wedged is not None:
            return wedged
        if self.identity_check is not None:
            return self.identity_check()
        return Verdict(True, "ok")


class _Handler(BaseHTTPRequestHandler):
    server: _HealthServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, self.server.metrics.render(), METRICS_CONTENT_TYPE)
            return
        if path == "/healthz":
            verdict = self.server.state.liveness()
        elif path == "/readyz":
            verdict = self.server.state.readiness()
        else:
            self._send(404, b"not found: use /healthz, /readyz or /metrics\n")
            return
        self._send(200 if verdict.ok else 503, verdict.reason.encode() + b"\n")

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("health request: " + format, *args)


HANGUP_ERRORS: Final = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
"""A probe client that went away before its answer (kubelet after its probe timeout)."""


class _HealthServer(ThreadingHTTPServer):
    daemon_threads = True
    state: PluginState
    metrics: Metrics

    def handle_error(self, request: object, client_address: Any) -> None:
        """Log a failed request as one line in the configured format.

        The default prints a traceback to stderr, outside logging: not JSON under
        ``--log-format json``, and many lines for what is only a client hanging up.
        """
        error = sys.exc_info()[1]
        peer = client_address[0] if isinstance(client_address, tuple) else client_address
        if isinstance(error, HANGUP_ERRORS):
            logger.debug(
                "health client %s hung up before its answer (%s)", peer, type(error).__name__
            )
            return
        logger.warning("health request from %s failed: %r", peer, error, exc_info=error)


class _HealthServer6(_HealthServer):
    address_family = socket.AF_INET6


class HealthServer:
    """The /healthz, /readyz and /metrics listener, bound at construction.

    Binding happens in ``__init__`` so a port clash fails the start (OSError)
    before the plugin registers with the runtime.
    """

    def __init__(self, host: str, port: int, state: PluginState, metrics: Metrics) -> None:
        server_class = _HealthServer6 if ":" in host else _HealthServer
        self._server = server_class((host, port), _Handler)
        self._server.state = state
        self._server.metrics = metrics
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL},
            name="nvml-mock-nri-health",
            daemon=True,
        )

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the port is real even when 0 was asked for)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
