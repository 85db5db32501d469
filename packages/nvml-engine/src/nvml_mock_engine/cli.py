"""The ``nvml-mock-engine`` command: render a node's state, find the library, list profiles.

``stage`` and ``agent`` are subcommands of the same command that nvml-mock-node registers
(:mod:`nvml_mock_engine.commands`). One ``main(argv)`` serves the console script and
``python -m nvml_mock_engine``. Each setting is a flag with an env twin (the flag wins; an
empty env value counts as unset), declared in :mod:`nvml_mock_engine.settings`, so the same
command works from a shell, a Dockerfile and a DaemonSet's env. Exit codes: 0 done, 1 runtime
failure (I/O, library not built), 2 usage error, 3 invalid config (the message names the
key). Logs go to stderr, so that stdout stays the command's output (a state file on ``-o -``,
a path from ``lib-path``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import configure_logging

from nvml_mock_engine._version import __version__
from nvml_mock_engine.commands import Command, engine_config, registered_commands
from nvml_mock_engine.errors import ConfigError, LiveLayerError, NvmlEngineError, StageError
from nvml_mock_engine.settings import (
    ENV_CONFIG_FILE,
    ENV_DRIVER_VERSION,
    ENV_GPU_COUNT,
    ENV_HOST_PATH,
    ENV_MOUNT_PATH,
    ENV_PROFILE,
    LOG_OPTIONS,
    NODE_OPTIONS,
    PROFILES_OPTIONS,
    RENDER_OPTIONS,
    CommandSettings,
    CtlSettings,
    ProfilesSettings,
    RenderSettings,
    config_error,
    located_by_flags,
)

__all__ = [
    "ENV_CONFIG_FILE",
    "ENV_DRIVER_VERSION",
    "ENV_GPU_COUNT",
    "ENV_HOST_PATH",
    "ENV_MOUNT_PATH",
    "ENV_PROFILE",
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
    "parse_settings",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3

logger = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None, extra: Iterable[Command] = ()) -> int:
    """Run the command line; returns the exit code. *extra* adds commands that no install
    registered (a package run from its source tree)."""
    commands = _commands(extra)
    args = _parser(commands).parse_args(argv)
    command = commands[args.command]
    try:
        settings = _settings(args, os.environ, command)
    except s.SettingsError as exc:
        # Logging is not set up yet (its own settings may be what is wrong).
        print(f"nvml-mock-engine: invalid configuration: {config_error(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format)
    try:
        result: int = command.handler(settings)
    except ConfigError as exc:
        logger.error("invalid configuration: %s", exc)
        return EXIT_CONFIG
    except StageError as exc:
        logger.error("staging failed: %s", exc)
        return EXIT_FAILURE
    except (NvmlEngineError, LiveLayerError, OSError) as exc:
        logger.error("%s", exc)
        return EXIT_FAILURE
    return result


def _own_commands() -> tuple[Command, ...]:
    return (
        Command(
            "render",
            "write a node's rendered GPU state",
            RenderSettings(),
            (*NODE_OPTIONS, *RENDER_OPTIONS),
            _cmd_render,
        ),
        Command(
            "lib-path",
            "print the path of the mock libnvidia-ml.so.1",
            CommandSettings(),
            (),
            _cmd_lib_path,
        ),
        Command(
            "profiles",
            "list the packaged GPU profiles",
            ProfilesSettings(),
            PROFILES_OPTIONS,
            _cmd_profiles,
        ),
    )


def _commands(extra: Iterable[Command] = ()) -> dict[str, Command]:
    """The engine's commands, then those installed packages register (``stage`` and
    ``agent`` come from nvml-mock-node), then *extra*."""
    own = {c.name: c for c in _own_commands()}
    found = {c.name: c for c in registered_commands(frozenset(own))}
    return {**own, **found, **{c.name: c for c in extra if c.name not in own}}


def parse_settings(
    argv: Sequence[str], environ: Mapping[str, str], extra: Iterable[Command] = ()
) -> CommandSettings:
    """What *argv* and *environ* resolve to, as :func:`main` resolves them (a usage error
    exits 2 as there); *extra* adds commands not installed (a chart's test reading the
    node's commands from their source tree)."""
    commands = _commands(extra)
    args = _parser(commands).parse_args(argv)
    return _settings(args, environ, commands[args.command])


def _settings(
    args: argparse.Namespace, environ: Mapping[str, str], command: Command
) -> CommandSettings:
    extra = {name: getattr(args, name) for name in command.positionals}
    options = (*LOG_OPTIONS, *command.options)
    settings = s.resolve(type(command.defaults), options, args, environ, **extra)
    # the flag wins across the live layer's location options too (the node agent's)
    return located_by_flags(settings, args) if isinstance(settings, CtlSettings) else settings


def _parser(commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-engine",
        description="Render mock GPU state, stage the nvml-mock overlay, locate the mock NVML.",
        epilog="Every flag with an env twin names it; the flag wins. Exit codes: 0 done, "
        "1 runtime failure, 2 usage error, 3 invalid configuration.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    defaults = CommandSettings()
    s.add_options(parser, LOG_OPTIONS, defaults)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands.values():
        sub = subparsers.add_parser(command.name, help=command.summary)
        # The same log flags after the subcommand, without resetting those given before it.
        s.add_options(sub, LOG_OPTIONS, defaults, suppress=True)
        if command.arguments is not None:
            command.arguments(sub)
        s.add_options(sub, command.options, command.defaults)
    return parser


def _cmd_render(settings: RenderSettings) -> int:
    from nvml_mock_engine._files import write_atomic
    from nvml_mock_engine.render import render_text

    config = engine_config(settings)
    text = render_text(config)
    if settings.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(Path(settings.output), text.encode())
        logger.info(
            "wrote %s: profile %s, %d GPU(s), node %s",
            settings.output,
            config.profile.key,
            config.count,
            config.node,
        )
    return EXIT_OK


def _cmd_lib_path(settings: CommandSettings) -> int:
    from nvml_mock_engine.library import library_path

    print(library_path())
    return EXIT_OK


def _cmd_profiles(settings: ProfilesSettings) -> int:
    from nvml_mock_engine.profiles import load_profile, profile_names

    for key in profile_names():
        profile = load_profile(key)
        memory = profile.gpu["memory_total_bytes"]
        assert isinstance(memory, int)
        summary = {
            "profile": key,
            "name": profile.name,
            "gpus": profile.default_count,
            "memory_mib": memory // (1 << 20),
            "architecture": profile.architecture_name,
            "compute_capability": f"{profile.cuda_cc[0]}.{profile.cuda_cc[1]}",
            "nvlinks": profile.gpu.get("nvlink_count", 0),
            "fabric": profile.fabric is not None,
            "driver": profile.driver_version,
        }
        if settings.json:
            print(json.dumps(summary))
        else:
            print(
                f"{key:6} {profile.name:24} {profile.default_count:2} GPUs "
                f"{summary['memory_mib']:>6} MiB  {profile.architecture_name:9} "
                f"cc {summary['compute_capability']:4}  NVLink x{summary['nvlinks']:<2} "
                f"fabric {'yes' if profile.fabric else 'no'}"
            )
    return EXIT_OK
