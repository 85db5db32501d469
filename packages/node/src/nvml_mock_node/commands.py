"""``nvml-mock-engine stage`` and ``nvml-mock-engine agent``: the node's commands.

They keep the engine command's name, which images, the chart and scripts call, while their
code lives here: this package registers them under the engine's entry-point group
(:data:`nvml_mock_engine.commands.ENTRY_POINT_GROUP`), so the engine imports nothing of it.
The handlers import staging and the agent on first use: the command line builds its parser
from these declarations on every call.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Final

from nvml_mock_engine.commands import Command, engine_config
from nvml_mock_engine.config import load_config_file
from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.settings import (
    AGENT_OPTIONS,
    CTL_OPTIONS,
    NODE_OPTIONS,
    STAGE_OPTIONS,
    AgentSettings,
    StageSettings,
)
from nvml_mock_protocol import names

__all__ = ["AGENT", "STAGE"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1

logger = logging.getLogger(__name__)


def _stage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", metavar="DIR", type=Path, help=f"overlay root (e.g. {names.OVERLAY_HOST_PATH})"
    )


def _cmd_stage(settings: StageSettings) -> int:
    from nvml_mock_engine.mig_layout import parse_spec

    from nvml_mock_node.stage import StageOptions, stage

    config = engine_config(settings)
    spec: object = settings.mig
    if spec is None and settings.config is not None:
        spec = load_config_file(settings.config).get("mig")
    mig = parse_spec(spec, config.profile.mig, config.count)
    options = StageOptions(
        mig=mig,
        devices=not settings.no_devices,
        driver_root=not settings.no_driver_root,
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
    refusals = [
        r
        for r in (report.devices_refused, report.imex_refused, report.driver_root_refused)
        if r is not None
    ]
    for refusal in refusals:
        logger.error("%s", refusal)
    return EXIT_FAILURE if refusals else EXIT_OK


def _cmd_agent(settings: AgentSettings) -> int:
    from nvml_mock_node.agent import run_agent  # the other commands need none of it

    if settings.topology_url and not settings.node:
        raise ConfigError("node", "is required with a topology service (--node, NODE_NAME)")
    return run_agent(settings)


STAGE: Final = Command(
    "stage",
    "lay out the overlay tree in DIR",
    StageSettings(dir=Path("DIR")),
    (*NODE_OPTIONS, *STAGE_OPTIONS),
    _cmd_stage,
    arguments=_stage_arguments,
    positionals=("dir",),
)
AGENT: Final = Command(
    "agent",
    "keep the driver surfaces true; with a topology service, apply this node's scenarios",
    AgentSettings(),
    (*CTL_OPTIONS, *AGENT_OPTIONS),
    _cmd_agent,
)
