"""Entry point: ``nvml-mock-topology-service`` and ``python -m nvml_mock_topology``.

Start-up is strict and the running service is forgiving: a bad flag, a missing
or invalid topology file, or a port that cannot be bound ends the process with
exit status 3 and a message naming the problem, because there is nothing good
to serve yet. Once serving, a bad new version of the file is refused and the
last good one keeps serving (see :mod:`nvml_mock_topology.source`).

Exit codes: 0 clean shutdown, 1 unexpected failure, 2 usage (argparse),
3 bad configuration or topology at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Final

import uvicorn
from nvml_mock_live.scenarios import ScenarioError, read_scenarios_file
from nvml_mock_protocol.logs import configure_logging
from nvml_mock_protocol.topology import TopologyError, read_topology_file

from nvml_mock_topology import allocator
from nvml_mock_topology._logging import uvicorn_log_config
from nvml_mock_topology.api import create_app
from nvml_mock_topology.connection import MAX_HEAD_BYTES, protocol_class
from nvml_mock_topology.errors import ConfigError, StartupError
from nvml_mock_topology.scenarios import ScenarioFile, ScenarioStore, WriteAccess
from nvml_mock_topology.settings import Settings, parse_settings
from nvml_mock_topology.snapshot import empty_document
from nvml_mock_topology.source import (
    StatFailure,
    TopologyFile,
    describe_failure,
    describe_os_error,
    signature_of,
)
from nvml_mock_topology.store import TopologyStore

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "main",
    "open_scenarios",
    "open_topology",
    "open_write_access",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_CONFIG: Final = 3
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

logger = logging.getLogger(__name__)


def open_topology(settings: Settings) -> tuple[TopologyStore, TopologyFile]:
    """Load the topology file for serving and set up its follower.

    Raises :class:`StartupError` when the file is missing (unless ``allow_empty``),
    unreadable, not a regular file, over the size limits or invalid, and when loading
    it fails in any other way: whatever the follower would refuse, the start refuses.
    """
    path = settings.topology_file
    signature = signature_of(path)  # before reading: a change during the read is seen later
    if isinstance(signature, StatFailure):
        raise StartupError(signature.message)
    source: str | None = str(path)
    try:
        document = read_topology_file(
            path, max_bytes=settings.max_file_bytes, max_items=settings.max_document_items
        )
    except FileNotFoundError:
        if not settings.allow_empty:
            raise StartupError(
                f"topology file {path} does not exist; mount it, point --topology-file "
                "(NVML_MOCK_TOPOLOGY_FILE) at it, or pass --allow-empty "
                "(NVML_MOCK_TOPOLOGY_ALLOW_EMPTY=true) to start empty and load it when it appears"
            ) from None
        logger.warning(
            "topology file %s does not exist; serving an empty topology until it appears", path
        )
        document, signature, source = empty_document(), None, None
    except TopologyError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(describe_os_error(path, exc)) from None
    except Exception as exc:
        logger.debug("loading the topology file failed", exc_info=True)
        raise StartupError(describe_failure(path, exc)) from None
    store = TopologyStore.from_document(document, source=source)
    follower = TopologyFile(
        path,
        store,
        loaded=signature,
        poll_interval=settings.poll_interval,
        max_bytes=settings.max_file_bytes,
        max_items=settings.max_document_items,
    )
    return store, follower


def open_scenarios(
    settings: Settings, topology: TopologyStore
) -> tuple[ScenarioStore, ScenarioFile | None]:
    """Load the scenario file (when configured) and set up its follower.

    A missing file serves no scenarios until it appears (scenarios are optional); an
    invalid or unreadable one stops the start, as an invalid topology does.
    """
    path = settings.scenarios_file
    if path is None:
        return ScenarioStore.start(topology), None
    signature = signature_of(path)
    if isinstance(signature, StatFailure):
        raise StartupError(signature.message.replace("topology file", "scenario file"))
    try:
        document = read_scenarios_file(
            path, max_bytes=settings.max_file_bytes, max_items=settings.max_document_items
        )
        source: str | None = str(path)
    except FileNotFoundError:
        logger.warning("scenario file %s does not exist; serving none until it appears", path)
        document, signature, source = None, None, None
    except ScenarioError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"scenario file {path} cannot be read: {exc.strerror or exc}") from None
    store = ScenarioStore.start(topology, document, source)
    follower = ScenarioFile(
        path,
        store,
        loaded=signature,
        poll_interval=settings.poll_interval,
        max_bytes=settings.max_file_bytes,
        max_items=settings.max_document_items,
    )
    return store, follower


def open_write_access(settings: Settings) -> WriteAccess:
    """The write API's access: off, or the token file, which must be readable and not empty."""
    access = WriteAccess(settings.write_token_file)
    try:
        access.load()
    except (OSError, ValueError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StartupError(
            f"write token file {settings.write_token_file} cannot be used: {detail}"
        ) from None
    return access


class _Server(uvicorn.Server):
    """uvicorn's server, made to end cleanly on SIGTERM/SIGINT.

    A stop closes the store's watches at once: the waiting ones answer unchanged, and
    so does every watch that arrives afterwards (a client re-watching on its kept-alive
    connection in the moment before uvicorn starts shutting connections down), each
    with ``Connection: close``, so clients reconnect to another replica instead of
    holding the shutdown until its graceful timeout. The process then exits 0 rather
    than re-raising the signal as uvicorn does.
    """

    store: TopologyStore | None = None
    scenarios: ScenarioStore | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    drain_seconds: float = 0.0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Drain first (``/readyz`` 503, still answering), then stop; a second signal stops
        at once. Draining lets Kubernetes take the endpoint out before connections are
        refused, so a rollout drops none."""
        store, loop = self.store, self._loop
        if store is None or loop is None or self.drain_seconds <= 0:
            self._stop(sig, frame)
            return
        if not store.draining and not self.should_exit:
            store.draining = True
            logger.info(
                "draining for %.1f s before stopping (readyz answers 503)", self.drain_seconds
            )
            loop.call_soon_threadsafe(loop.call_later, self.drain_seconds, self._drained, sig)
            return
        self._stop(sig, frame)

    def _drained(self, sig: int) -> None:
        if not self.should_exit:  # a second signal may have stopped it already
            self._stop(sig, None)

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if self.store is not None and self._loop is not None and not self.should_exit:
            self._loop.call_soon_threadsafe(self.store.close)
            if self.scenarios is not None:
                self._loop.call_soon_threadsafe(self.scenarios.release_watchers)
        super().handle_exit(sig, frame)


def _raise_open_file_limit() -> None:
    # Each watch holds a connection; the default soft limit (often 1024) is too few.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # pragma: no cover - depends on the host
            logger.debug("could not raise the open file limit from %d", soft)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the topology service until it is stopped; returns the exit status."""
    try:
        settings = parse_settings(argv)
    except ConfigError as exc:
        print(f"nvml-mock-topology-service: bad configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format)
    allocator.tune()
    try:
        store, follower = open_topology(settings)
        scenarios, scenario_follower = open_scenarios(settings, store)
        write_access = open_write_access(settings)
    except StartupError as exc:
        logger.error("cannot start: %s", exc)
        return EXIT_CONFIG
    snapshot = store.snapshot
    logger.info(
        "serving topology revision %d from %s",
        snapshot.revision,
        snapshot.source or "(empty: no file yet)",
        extra={"nodes": snapshot.node_count, "domains": len(snapshot.document.domains)},
    )
    _raise_open_file_limit()
    # What was loaded lives as long as it serves: out of the collector's full passes, which
    # would otherwise walk every answer of a 10,000-node document and pause every request.
    gc.freeze()
    app = create_app(
        store,
        follower,
        max_watch_seconds=settings.max_watch_seconds,
        scenarios=scenarios,
        scenario_follower=scenario_follower,
        write_access=write_access,
        report_rate=settings.report_rate,
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=uvicorn_log_config(settings.log_level),
        access_log=settings.access_log,
        http=protocol_class(settings.header_timeout),
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        limit_concurrency=settings.max_connections,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        backlog=4096,
        timeout_graceful_shutdown=10,
        server_header=False,
    )
    server = _Server(config)
    server.store = store
    server.scenarios = scenarios
    server.drain_seconds = settings.drain_seconds
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits this way when it cannot bind (not started)
        if server.started:
            return int(exc.code) if isinstance(exc.code, int) else EXIT_FAILURE
    except Exception:
        logger.exception("the topology service failed")
        return EXIT_FAILURE
    if not server.started:
        logger.error("cannot start: could not listen on %s:%d", settings.host, settings.port)
        return EXIT_CONFIG
    return EXIT_OK
