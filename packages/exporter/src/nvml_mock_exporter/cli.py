"""Entry point: ``nvml-mock-exporter`` and ``python -m nvml_mock_exporter``.

Start-up is strict: a bad flag or env value, a counters file with a bad line, no NVML, or
a port that cannot be bound ends the process (exit 3) naming the problem, because there is
nothing good to serve. Once serving, the exporter is forgiving: a bad new counters file is
refused while the last good set serves, a lost GPU drops its series, a stuck NVML call
leaves its GPU out.

Exit codes: 0 stopped (SIGTERM/SIGINT), 1 unexpected failure, 2 usage, 3 bad configuration,
no NVML, or the port cannot be bound.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Final

import pynvml
from nvml_mock_protocol.logs import configure_logging

from nvml_mock_exporter.collector import Collector, Labels
from nvml_mock_exporter.counters import CountersFile
from nvml_mock_exporter.errors import ArgumentsError, ConfigError, CountersFileError
from nvml_mock_exporter.pods import PodRecords, loaded_library
from nvml_mock_exporter.readings import discover, driver_version
from nvml_mock_exporter.restage import StateFile
from nvml_mock_exporter.server import MetricsServer
from nvml_mock_exporter.settings import Settings, live_file_of, parse_settings
from nvml_mock_exporter.xid import XidWatcher

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3

logger = logging.getLogger(__name__)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def build(settings: Settings) -> tuple[Collector, XidWatcher, PodRecords | None]:
    """NVML initialised, the GPUs found, and the collector wired (not started)."""
    counters = CountersFile.open(settings.collectors)
    pynvml.nvmlInit()
    gpus = discover()
    try:
        nvml_version = _text(pynvml.nvmlSystemGetNVMLVersion())
    except pynvml.NVMLError:
        nvml_version = ""
    xids = XidWatcher(gpus, settings.xid_window_ms / 1000)
    pods = None
    state = os.environ.get("MOCK_NVML_CONFIG", "").strip()
    if settings.kubernetes:
        pods = PodRecords(
            live_file_of(settings, os.environ), loaded_library(), Path(state) if state else None
        )
    host_key = None if settings.hostname_label == "none" else settings.hostname_label
    collector = Collector(
        gpus=gpus,
        counters=counters,
        xids=xids,
        pods=pods,
        labels=Labels(
            host_key=host_key,
            host=settings.host_label,
            driver=driver_version(),
            nvml_version=nvml_version,
            window_ms=settings.xid_window_ms,
        ),
        interval=settings.collect_interval,
        nvml_timeout=settings.nvml_timeout,
        state=StateFile(Path(state)) if state else None,
    )
    return collector, xids, pods


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; returns the exit status."""
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except ArgumentsError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"nvml-mock-exporter: bad configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format)
    try:
        collector, xids, pods = build(settings)
    except CountersFileError as exc:
        logger.error("cannot start: %s", exc)
        return EXIT_CONFIG
    except pynvml.NVMLError as exc:
        logger.error("cannot start: NVML: %s (is libnvidia-ml.so.1 on the library path?)", exc)
        return EXIT_CONFIG
    try:
        server = MetricsServer(
            (settings.host, settings.port),
            collector,
            max_connections=settings.max_connections,
            header_timeout=settings.request_timeout,
        )
    except OSError as exc:
        logger.error(
            "cannot start: cannot listen on %s:%d: %s", settings.host, settings.port, exc.strerror
        )
        return EXIT_CONFIG
    xids.start()
    collector.start()
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            server.shutdown()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    host, port = server.server_address[:2]
    logger.info(
        "serving %d GPUs on http://%s:%d/metrics",
        len(collector.gpus),
        host,
        port,
        extra={"gpus": len(collector.gpus), "port": port},
    )
    try:
        server.serve_forever()
    except Exception:
        logger.exception("the exporter failed")
        return EXIT_FAILURE
    finally:
        server.server_close()
        collector.stop()
        collector.xids.stop()
        if pods is not None:
            pods.close()
    logger.info("stopped")
    return EXIT_OK
