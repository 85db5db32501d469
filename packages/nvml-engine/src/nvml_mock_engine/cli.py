"""The ``nvml-mock-engine`` command: render a node's state, stage the overlay, find the library.

One ``main(argv)`` serves the console script and ``python -m nvml_mock_engine``. Each
setting is a flag with an env twin (the flag wins; an empty env value counts as unset),
declared in :mod:`nvml_mock_engine.settings`, so the same command works from a shell, a
Dockerfile and a DaemonSet's env. Exit codes: 0 done, 1 runtime failure (I/O, library not
built), 2 usage error, 3 invalid config (the message names the key). Logs go to stderr, so
that stdout stays the command's output (a state file on ``-o -``, a path from ``lib-path``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import configure_logging

from nvml_mock_engine._version import __version__
from nvml_mock_engine.config import EngineConfig, load_config_file, resolve_config
from nvml_mock_engine.errors import ConfigError, LiveLayerError, NvmlEngineError, StageError
from nvml_mock_engine.settings import (
    AGENT_OPTIONS,
    CTL_OPTIONS,
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
    STAGE_OPTIONS,
    AgentSettings,
    CommandSettings,
    NodeSettings,
    ProfilesSettings,
    RenderSettings,
    StageSettings,
    config_error,
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
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3

logger = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args, os.environ)
    except s.SettingsError as exc:
        # Logging is not set up yet (its own settings may be what is wrong).
        print(f"nvml-mock-engine: invalid configuration: {config_error(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format)
    try:
        result: int = args.handler(settings)
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


_COMMANDS: Final[Mapping[str, tuple[type[CommandSettings], tuple[s.Option, ...]]]] = {
    "render": (RenderSettings, (*NODE_OPTIONS, *RENDER_OPTIONS)),
    "stage": (StageSettings, (*NODE_OPTIONS, *STAGE_OPTIONS)),
    "lib-path": (CommandSettings, ()),
    "profiles": (ProfilesSettings, PROFILES_OPTIONS),
    "agent": (AgentSettings, (*CTL_OPTIONS, *AGENT_OPTIONS)),
}
"""Each subcommand's settings class and its own options (the log options come on top)."""


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> CommandSettings:
    cls, options = _COMMANDS[args.command]
    extra = {"dir": args.dir} if cls is StageSettings else {}
    return s.resolve(cls, (*LOG_OPTIONS, *options), args, environ, **extra)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-engine",
        description="Render mock GPU state, stage the nvml-mock overlay, locate the mock NVML.",
        epilog="Every flag with an env twin names it; the flag wins. Exit codes: 0 done, "
        "1 runtime failure, 2 usage error, 3 invalid configuration.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    defaults = StageSettings(dir=Path("DIR"))
    s.add_options(parser, LOG_OPTIONS, defaults)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, summary: str, handler: Callable[..., int]) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary)
        # The same log flags after the subcommand, without resetting those given before it.
        s.add_options(sub, LOG_OPTIONS, defaults, suppress=True)
        sub.set_defaults(handler=handler)
        return sub

    render = add("render", "write a node's rendered GPU state", _cmd_render)
    s.add_options(render, (*NODE_OPTIONS, *RENDER_OPTIONS), RenderSettings())

    stage = add("stage", "lay out the overlay tree in DIR", _cmd_stage)
    stage.add_argument(
        "dir", metavar="DIR", type=Path, help=f"overlay root (e.g. {names.OVERLAY_HOST_PATH})"
    )
    s.add_options(stage, (*NODE_OPTIONS, *STAGE_OPTIONS), defaults)

    add("lib-path", "print the path of the mock libnvidia-ml.so.1", _cmd_lib_path)

    profiles = add("profiles", "list the packaged GPU profiles", _cmd_profiles)
    s.add_options(profiles, PROFILES_OPTIONS, ProfilesSettings())

    agent = add(
        "agent",
        "apply this node's scenarios from the topology service in its live layer",
        _cmd_agent,
    )
    s.add_options(agent, (*CTL_OPTIONS, *AGENT_OPTIONS), AgentSettings())
    return parser


def _cmd_agent(settings: AgentSettings) -> int:
    from nvml_mock_engine.agent import run_agent  # the other commands need none of it

    if not settings.topology_url:
        raise ConfigError("topology_url", "is required (--topology-url, NVML_MOCK_TOPOLOGY_URL)")
    if not settings.node:
        raise ConfigError("node", "is required (--node, NODE_NAME)")
    return run_agent(settings)


def _engine_config(settings: NodeSettings) -> EngineConfig:
    file_data = load_config_file(settings.config) if settings.config is not None else None
    return resolve_config(
        profile=settings.profile,
        count=settings.count,
        node=settings.node,
        driver_version=settings.driver_version,
        file_data=file_data,
        default_node=socket.gethostname() or "localhost",
    )


def _cmd_render(settings: RenderSettings) -> int:
    from nvml_mock_engine.render import render_text
    from nvml_mock_engine.stage import write_atomic

    config = _engine_config(settings)
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


def _cmd_stage(settings: StageSettings) -> int:
    from nvml_mock_engine.mig_layout import parse_spec
    from nvml_mock_engine.stage import StageOptions, stage

    config = _engine_config(settings)
    spec: object = settings.mig
    if spec is None and settings.config is not None:
        spec = load_config_file(settings.config).get("mig")
    mig = parse_spec(spec, config.profile.mig, config.count)
    options = StageOptions(
        mig=mig,
        devices=not settings.no_devices,
        mount_path=settings.mount_path,
        host_path=settings.host_path,
        imex_channels=settings.imex_channels,
        imex_major=settings.imex_major,
    )
    report = stage(settings.dir, config, options)
    logger.info(
        "staged %s: profile %s, %d GPU(s), node %s, runtime %s in %.2fs",
        settings.dir,
        config.profile.key,
        config.count,
        config.node,
        "reused" if report.runtime_reused else "built",
        report.seconds,
    )
    if report.imex_major is not None:
        logger.info(
            "IMEX channels: %d node(s) of %d, major %d in %s/%s",
            report.imex_channels_created,
            settings.imex_channels,
            report.imex_major,
            names.OVERLAY_IMEX_DIR,
            names.IMEX_PROC_DEVICES_FILE,
        )
    for warning in report.warnings:
        logger.warning("%s", warning)
    refusals = [r for r in (report.devices_refused, report.imex_refused) if r is not None]
    for refusal in refusals:
        logger.error("%s", refusal)
    return EXIT_FAILURE if refusals else EXIT_OK


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
