"""Subcommands of ``nvml-mock-engine``, the engine's own and those other packages add.

The engine's command line renders a node's state, finds the library and lists the profiles.
Staging the overlay and running the node agent belong to ``nvml-mock-node``, which builds
on the engine and which the engine must not import; yet ``nvml-mock-engine stage`` and
``nvml-mock-engine agent`` keep the names that images, charts and scripts use. So a package
declares a :class:`Command` and registers it under the entry-point group
:data:`ENTRY_POINT_GROUP` (as the live package finds the library through an entry point):
the engine names the group, the other package names itself, and the import arrow keeps
pointing down. One console script stays with one distribution, so installing a package
never overwrites another's ``nvml-mock-engine``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from nvml_mock_protocol import settings as s

from nvml_mock_engine.config import EngineConfig, load_config_file, resolve_config
from nvml_mock_engine.settings import CommandSettings, NodeSettings

__all__ = ["ENTRY_POINT_GROUP", "Command", "engine_config", "registered_commands"]

ENTRY_POINT_GROUP: Final = "nvml_mock_engine.commands"
"""Entry points here name a :class:`Command`; their name is the subcommand's."""


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its flags (each with an env twin) and what runs it."""

    name: str
    summary: str
    defaults: CommandSettings
    """The settings with their defaults; its class resolves the command's flags and env."""
    options: tuple[s.Option, ...]
    """The command's own options (the log options come on top)."""
    handler: Callable[[Any], int]
    """Runs the command with the resolved settings; returns the exit code."""
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds positional arguments, if any, before the options."""
    positionals: tuple[str, ...] = ()
    """The positional arguments passed on to the settings class."""


def engine_config(settings: NodeSettings) -> EngineConfig:
    """The node's resolved config from its node options (profile, count, node, config file)."""
    file_data = load_config_file(settings.config) if settings.config is not None else None
    return resolve_config(
        profile=settings.profile,
        count=settings.count,
        node=settings.node,
        driver_version=settings.driver_version,
        file_data=file_data,
        default_node=socket.gethostname() or "localhost",
    )


def registered_commands(taken: frozenset[str]) -> Iterator[Command]:
    """The commands other installed packages register, by name; none named in *taken*.

    A package whose entry point cannot load costs only its own commands: the reason goes to
    stderr and the engine's commands keep working."""
    for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=_name):
        if entry.name in taken:
            continue
        try:
            command = entry.load()
        except Exception as exc:
            print(
                f"nvml-mock-engine: cannot load command {entry.name!r} ({entry.value}): {exc}",
                file=sys.stderr,
            )
            continue
        if not isinstance(command, Command) or command.name != entry.name:
            print(
                f"nvml-mock-engine: {entry.value} is not a Command named {entry.name!r}",
                file=sys.stderr,
            )
            continue
        yield command


def _name(entry: importlib.metadata.EntryPoint) -> str:
    return entry.name
