"""The ``nvml-mock-engine`` command: render a node's state, stage the overlay, find the library.

One ``main(argv)`` serves the console script and ``python -m nvml_mock_engine``. Each
setting is a flag with an env twin (the flag wins; an empty env value counts as unset), so
the same command works from a shell, a Dockerfile and a DaemonSet's env. Exit codes: 0
done, 1 runtime failure (I/O, library not built), 2 usage error, 3 invalid config (the
message names the key).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from nvml_mock_protocol import names

from nvml_mock_engine._logging import add_logging_args, configure_logging
from nvml_mock_engine._version import __version__
from nvml_mock_engine.config import EngineConfig, load_config_file, resolve_config
from nvml_mock_engine.errors import ConfigError, NvmlEngineError, StageError
from nvml_mock_engine.schema import MAX_GPUS

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3

ENV_PROFILE: Final = "NVML_MOCK_PROFILE"
ENV_GPU_COUNT: Final = "NVML_MOCK_GPU_COUNT"
ENV_CONFIG_FILE: Final = "NVML_MOCK_ENGINE_CONFIG"
ENV_DRIVER_VERSION: Final = "NVML_MOCK_DRIVER_VERSION"
ENV_MOUNT_PATH: Final = names.ENV_OVERLAY_MOUNT_PATH
ENV_HOST_PATH: Final = names.ENV_OVERLAY_HOST_PATH

logger = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    environ = os.environ
    parser = _parser(environ)
    args = parser.parse_args(argv)
    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:
        print(f"nvml-mock-engine: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        result: int = args.handler(args)
    except ConfigError as exc:
        logger.error("invalid configuration: %s", exc)
        return EXIT_CONFIG
    except StageError as exc:
        logger.error("staging failed: %s", exc)
        return EXIT_FAILURE
    except (NvmlEngineError, OSError) as exc:
        logger.error("%s", exc)
        return EXIT_FAILURE
    return result


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-engine",
        description="Render mock GPU state, stage the nvml-mock overlay, locate the mock NVML.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_logging_args(parser, environ)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = commands.add_parser("render", help="write a node's rendered GPU state")
    add_logging_args(render, environ, sub=True)
    _add_node_args(render, environ)
    render.add_argument(
        "-o", "--output", default="-", help="state file to write, '-' for stdout (default)"
    )
    render.set_defaults(handler=_cmd_render)

    stage = commands.add_parser("stage", help="lay out the overlay tree in DIR")
    add_logging_args(stage, environ, sub=True)
    stage.add_argument(
        "dir", metavar="DIR", type=Path, help=f"overlay root (e.g. {names.OVERLAY_HOST_PATH})"
    )
    _add_node_args(stage, environ)
    stage.add_argument(
        "--no-devices", action="store_true", help="do not create mock device nodes under dev/"
    )
    stage.add_argument(
        "--mount-path",
        default=environ.get(ENV_MOUNT_PATH) or names.OVERLAY_MOUNT_PATH,
        help="where containers see the overlay; the launchers fall back to it when they "
        f"cannot resolve their own path (env {ENV_MOUNT_PATH}; default {names.OVERLAY_MOUNT_PATH})",
    )
    stage.add_argument(
        "--host-path",
        default=environ.get(ENV_HOST_PATH) or None,
        help="where the host sees DIR, for the CDI spec's device hostPath when DIR is mounted "
        f"elsewhere in the staging container (env {ENV_HOST_PATH}; default DIR)",
    )
    stage.set_defaults(handler=_cmd_stage)

    lib_path = commands.add_parser("lib-path", help="print the path of the mock libnvidia-ml.so.1")
    add_logging_args(lib_path, environ, sub=True)
    lib_path.set_defaults(handler=_cmd_lib_path)

    profiles = commands.add_parser("profiles", help="list the packaged GPU profiles")
    add_logging_args(profiles, environ, sub=True)
    profiles.add_argument("--json", action="store_true", help="one JSON object per profile")
    profiles.set_defaults(handler=_cmd_profiles)
    return parser


def _add_node_args(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    parser.add_argument(
        "--profile",
        default=environ.get(ENV_PROFILE) or None,
        help=f"profile name or profile file (env {ENV_PROFILE}; default: config file, else a100)",
    )
    parser.add_argument(
        "--count",
        default=environ.get(ENV_GPU_COUNT) or None,
        help=f"GPUs on the node, 1..{MAX_GPUS} "
        f"(env {ENV_GPU_COUNT}; default: the profile's node size)",
    )
    parser.add_argument(
        "--node",
        default=environ.get(names.ENV_NODE_NAME) or None,
        help=f"node name seeding UUIDs and serials (env {names.ENV_NODE_NAME}; default hostname)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=environ.get(ENV_CONFIG_FILE) or None,
        help=f"YAML config file: profile, count, overrides (env {ENV_CONFIG_FILE})",
    )
    parser.add_argument(
        "--driver-version",
        default=environ.get(ENV_DRIVER_VERSION) or None,
        help=f"driver version to report (env {ENV_DRIVER_VERSION}; default: the profile's)",
    )


def _engine_config(args: argparse.Namespace) -> EngineConfig:
    count: int | None = None
    if args.count is not None:
        try:
            count = int(args.count)
        except ValueError:
            raise ConfigError(
                "count", f"must be an integer in 1..{MAX_GPUS}, got {args.count!r}"
            ) from None
    file_data = load_config_file(Path(args.config)) if args.config is not None else None
    return resolve_config(
        profile=args.profile,
        count=count,
        node=args.node,
        driver_version=args.driver_version,
        file_data=file_data,
        default_node=socket.gethostname() or "localhost",
    )


def _cmd_render(args: argparse.Namespace) -> int:
    from nvml_mock_engine.render import render_text
    from nvml_mock_engine.stage import write_atomic

    config = _engine_config(args)
    text = render_text(config)
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_atomic(Path(args.output), text.encode())
        logger.info(
            "wrote %s: profile %s, %d GPU(s), node %s",
            args.output,
            config.profile.key,
            config.count,
            config.node,
        )
    return EXIT_OK


def _cmd_stage(args: argparse.Namespace) -> int:
    from nvml_mock_engine.stage import StageOptions, stage

    config = _engine_config(args)
    options = StageOptions(
        devices=not args.no_devices, mount_path=args.mount_path, host_path=args.host_path
    )
    report = stage(args.dir, config, options)
    logger.info(
        "staged %s: profile %s, %d GPU(s), node %s, runtime %s in %.2fs",
        args.dir,
        config.profile.key,
        config.count,
        config.node,
        "reused" if report.runtime_reused else "built",
        report.seconds,
    )
    for warning in report.warnings:
        logger.warning("%s", warning)
    if report.devices_refused is not None:
        logger.error("%s", report.devices_refused)
        return EXIT_FAILURE
    return EXIT_OK


def _cmd_lib_path(args: argparse.Namespace) -> int:
    from nvml_mock_engine.library import library_path

    print(library_path())
    return EXIT_OK


def _cmd_profiles(args: argparse.Namespace) -> int:
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
        if args.json:
            print(json.dumps(summary))
        else:
            print(
                f"{key:6} {profile.name:24} {profile.default_count:2} GPUs "
                f"{summary['memory_mib']:>6} MiB  {profile.architecture_name:9} "
                f"cc {summary['compute_capability']:4}  NVLink x{summary['nvlinks']:<2} "
                f"fabric {'yes' if profile.fabric else 'no'}"
            )
    return EXIT_OK
