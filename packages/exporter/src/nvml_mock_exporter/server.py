"""The HTTP side: ``/metrics`` (the last collection's text), ``/health``, and nothing else.

The standard library's threading server, on purpose: a scrape only copies bytes already
rendered, so an ASGI stack would add tens of megabytes of resident memory for nothing
(the exporter stays under 40 MB on a 64-GPU node, README "Benchmarks"). Each request has
its own thread, sockets time out after 10 s, and a request for anything else is a 404.
"""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from nvml_mock_exporter.collector import Collector

__all__ = ["CONTENT_TYPE", "MetricsServer"]

logger = logging.getLogger(__name__)
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = 10
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        collector = self.server.collector
        if path == "/metrics":
            status, kind, payload = 200, CONTENT_TYPE, collector.text
        elif path == "/health":
            ok, why = collector.healthy()
            status, kind, payload = (200 if ok else 503), "text/plain", (why + "\n").encode()
        else:
            status, kind, payload = 404, "text/plain", b"not found: try /metrics or /health\n"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("%s " + format, self.address_string(), *args)


class MetricsServer(ThreadingHTTPServer):
    """Serves one collector's text."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], collector: Collector) -> None:
        self.collector = collector
        super().__init__(address, _Handler)
