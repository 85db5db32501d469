"""A loopback HTTP server standing in for the API server, and a kubeconfig that points
``apply`` at it: the tests that watch what ``apply`` sends (or that it sends nothing) share
one way to stand it up and take it down."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def api_server(handler: type[BaseHTTPRequestHandler], kubeconfig: Path) -> Iterator[Path]:
    """Serve *handler* on a free loopback port until the block ends; *kubeconfig* is written
    to reach it (with a token user and one context) and is what the block gets."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{httpd.server_port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n",
        encoding="utf-8",
    )
    try:
        yield kubeconfig
    finally:
        httpd.shutdown()
        httpd.server_close()
