"""``nvml-mock-nri-plugin``: parse settings, set up logging, run the plugin.

Exit codes: 0 stopped by SIGTERM/SIGINT; 1 the runtime connection could not be
made or was lost (kubelet restarts the pod); 2 usage error; 3 bad configuration
(a flag, env var or runtime-sent config value, or the health port in use).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from nvml_mock_nri._logging import configure_logging
from nvml_mock_nri._version import __version__
from nvml_mock_nri.errors import ConfigError
from nvml_mock_nri.service import EXIT_CONFIG, PluginService
from nvml_mock_nri.settings import Settings, describe, load_settings

logger = logging.getLogger(__name__)


async def serve(settings: Settings) -> int:
    """Run one plugin until a signal or the end of the runtime connection."""
    service = PluginService(settings)
    # What start-up built (modules, settings, metrics: most of the process's objects) lives
    # as long as the process: moved out of the collector's sight, no collection walks it
    # again, and the pauses of those walks no longer land in the runtime's calls.
    gc.collect()
    gc.freeze()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal, service, signum)
    try:
        return await service.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def _on_signal(service: PluginService, signum: int) -> None:
    logger.info("received %s", signal.Signals(signum).name)
    service.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m nvml_mock_nri``."""
    try:
        settings = load_settings(argv, os.environ)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    except ConfigError as exc:
        print(f"nvml-mock-nri-plugin: bad configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format)
    logger.info("nvml-mock-nri-plugin %s starting: %s", __version__, describe(settings))
    code = asyncio.run(serve(settings))
    logger.info("exiting with code %d", code)
    return code
