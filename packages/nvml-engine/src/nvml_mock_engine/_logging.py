"""The logging flags of this package's commands, over the shared log-line contract.

The handler, the text and JSON line shapes, the formats, the levels and the env
names are the ones every nvml-mock command shares (``nvml_mock_protocol.logs``);
``configure_logging`` is that one, re-exported for the entry point. What is this
package's own is how ``--log-format`` / ``--log-level`` sit on a command with
subcommands. Logs go to stderr so that stdout stays the command's output (a
state file on ``-o -``, a path from ``lib-path``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from nvml_mock_protocol.logs import (
    DEFAULT_LOG_FORMAT,
    ENV_LOG_FORMAT,
    ENV_LOG_LEVEL,
    LOG_FORMATS,
    LOG_LEVELS,
    configure_logging,
)

__all__ = ["add_logging_args", "configure_logging"]


def add_logging_args(
    parser: argparse.ArgumentParser, environ: Mapping[str, str], *, sub: bool = False
) -> None:
    """Add ``--log-format`` and ``--log-level`` with their env twins as defaults.

    With ``sub=True`` (for subcommand parsers) the options default to "not given", so the
    same options may appear before or after the subcommand without one resetting the other.
    """
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=argparse.SUPPRESS if sub else environ.get(ENV_LOG_FORMAT, DEFAULT_LOG_FORMAT),
        help=f"log line format on stderr (env {ENV_LOG_FORMAT}; default {DEFAULT_LOG_FORMAT})",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        default=argparse.SUPPRESS if sub else environ.get(ENV_LOG_LEVEL, "info").lower(),
        help=f"lowest level logged (env {ENV_LOG_LEVEL}; default info)",
    )
