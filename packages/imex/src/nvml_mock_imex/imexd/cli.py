"""``nvidia-imex [-c CONFIG] [--nogpu]``: start the IMEX daemon work-alike.

Exit codes: 0 stopped by SIGTERM/SIGINT; 1 the config file or node list cannot be used (the
message names the file, line and value), or no node of the list is this host; 2 usage.
With ``DAEMONIZE=1`` (NVIDIA's default) the command returns 0 once the daemon listens and
the daemon goes on in the background; the DRA driver's template sets ``DAEMONIZE=0``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from nvml_mock_imex.clique import from_environ
from nvml_mock_imex.config import ImexConfig, load_config
from nvml_mock_imex.errors import ImexError
from nvml_mock_imex.imexd.bind import bind_node
from nvml_mock_imex.imexd.daemon import Daemon, command_sockets
from nvml_mock_imex.nodes import load_nodes
from nvml_mock_imex.version import driver_version

__all__ = ["DEFAULT_CONFIG", "main"]

DEFAULT_CONFIG: Final = "/etc/nvidia-imex/config.cfg"
_LEVELS: Final = {1: logging.CRITICAL, 2: logging.ERROR, 3: logging.WARNING, 4: logging.INFO}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvidia-imex",
        description="IMEX daemon work-alike of nvml-mock: joins the IMEX domain its node list "
        "names and answers nvidia-imex-ctl.",
    )
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG, help="IMEX config file")
    parser.add_argument(
        "--nogpu", action="store_true", help="accepted for NVIDIA's flag; a mock node has no GPU"
    )
    return parser


def _logging(config: ImexConfig) -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    if config.log_level == 0:
        root.addHandler(logging.NullHandler())
        return
    handler: logging.Handler
    if config.log_file:
        try:
            handler = logging.FileHandler(config.log_file)
        except OSError:
            handler = logging.StreamHandler(sys.stderr)  # NVIDIA's: stderr when unopenable
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] [%(levelname)s] [tid %(thread)d] %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(_LEVELS[config.log_level])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the daemon; its exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        config = load_config(args.config)
        nodes = load_nodes(config.node_config_file)
        _logging(config)
        clique = from_environ()
        bound = bind_node(config, nodes)
        commands = command_sockets(config, bound)
    except ImexError as exc:
        print(f"nvidia-imex: {exc}", file=sys.stderr)
        return 1
    if config.daemonize:
        if os.fork() != 0:
            return 0
        os.setsid()
    clique.start()  # its thread starts after the fork, in the process that keeps it
    daemon = Daemon(config, nodes, bound, clique, driver_version())
    return asyncio.run(daemon.run(commands))
