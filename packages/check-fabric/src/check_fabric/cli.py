"""The check-fabric command: read, check, report, and map the outcome to an exit code.

This is the one place where failures become exit codes: every ``CheckFabricError``
(usage, config, NVML, topology) is 1; otherwise the verdict of the checks
decides (0 ok, 2 fabric not supported or no GPU at all, 3 mismatch), and with
``--imex`` the worse of it and the IMEX channel check's (0, 2 no channel, 1 a
channel present but unusable). An interrupt is 130, as for
any shell command; a reader that closed stdout ends the run quietly with 1, and
a defect in check-fabric itself is 1 with one line and no traceback. NVML is
read before the topology service is asked, so a report of the GPUs comes out
even when the service is down.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from nvml_mock_protocol.logs import configure_logging

from check_fabric import topology
from check_fabric.checks import Expectations, Verdict, evaluate
from check_fabric.errors import CheckFabricError, UsageError
from check_fabric.imex import check_channels
from check_fabric.model import ExitCode, GpuFabric, TopologyAnswer
from check_fabric.nvml import FabricReader
from check_fabric.render import TextReport, exit_code, report_doc
from check_fabric.settings import ENV_JSON, Settings, load_settings

logger = logging.getLogger(__name__)


def _print_json(out: TextIO, doc: object) -> None:
    out.write(json.dumps(doc, indent=2) + "\n")
    out.flush()


def run(settings: Settings, out: TextIO, err: TextIO) -> int:
    """One check: NVML, then the topology service if configured, then the verdict.

    With ``--imex`` the IMEX channels are checked after the GPUs (also when NVML failed:
    the two are independent), and the exit status is the worse of the two; with
    ``--imex-only`` they are the only check.
    """
    text = None if settings.json else TextReport(out, err)
    gpus: list[GpuFabric] = []
    count: int | None = None
    api: str | None = None
    answer: TopologyAnswer | None = None
    verdict: Verdict | None = None
    error: CheckFabricError | None = None
    if not settings.imex_only:
        try:
            with FabricReader() as reader:
                count = reader.device_count()
                if text:
                    text.discovered(count)
                    if reader.no_gpu is not None:
                        text.note(str(reader.no_gpu))
                for index in range(count):
                    gpu = reader.read(index)
                    gpus.append(gpu)
                    if text:
                        text.gpu(gpu)
                api = reader.api
            if settings.topology_url is not None and settings.node_name is not None:
                answer = topology.lookup(
                    settings.topology_url, settings.node_name, settings.topology_timeout
                )
            verdict = evaluate(
                gpus,
                Expectations(
                    clique_id=settings.expect_clique,
                    cluster_uuid=settings.expect_cluster_uuid,
                    require_completed=settings.require_completed,
                    topology=answer,
                ),
            )
        except CheckFabricError as exc:
            error = exc
    channels = check_channels(settings.imex_dir, settings.proc_devices) if settings.imex else None
    if text is None:
        doc = report_doc(
            gpu_count=count,
            gpus=gpus,
            verdict=verdict,
            topology=answer,
            error=error,
            api=api,
            imex=channels,
            fabric=not settings.imex_only,
        )
        _print_json(out, doc)
    else:
        if error is not None:
            text.fail(error)
        elif verdict is not None:
            text.finish(verdict)
        if channels is not None:
            text.imex(channels)
    return int(exit_code(verdict, error, channels, fabric=not settings.imex_only))


def _wants_json(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Best effort, for reporting a bad command line in the form the caller asked for."""
    for arg in reversed(argv):
        if arg in ("--json", "--no-json"):
            return arg == "--json"
    return environ.get(ENV_JSON, "").strip().lower() in ("1", "true", "yes", "on")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``check-fabric`` and ``python -m check_fabric``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(args, os.environ)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except CheckFabricError as error:
        if _wants_json(args, os.environ):
            doc = report_doc(
                gpu_count=None,
                gpus=[],
                verdict=None,
                topology=None,
                error=error,
                api=None,
                imex=None,
                fabric=True,
            )
            _print_json(sys.stdout, doc)
        else:
            prefix = "usage error" if isinstance(error, UsageError) else "config error"
            sys.stderr.write(f"check-fabric: {prefix}: {error}\n")
        return int(ExitCode.ERROR)
    # Logs go to stderr, never into the report on stdout that scripts parse.
    configure_logging(settings.log_level, settings.log_format)
    try:
        return run(settings, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``check-fabric | head``): stop quietly, and keep the
        # interpreter's final flush from failing on the same pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.ERROR)
    except Exception as exc:  # a defect in check-fabric itself: say so, exit 1, no traceback dump
        logger.debug("unexpected failure", exc_info=True)
        sys.stderr.write(f"check-fabric: internal error: {type(exc).__name__}: {exc}\n")
        return int(ExitCode.ERROR)
