"""The two output forms: the reference's text lines and one JSON document.

The text form is line-for-line what the reference tool prints on stdout, so the
scripts that grep or awk it keep working; everything check-fabric adds (check
results, mismatches, errors) goes to stderr. The JSON form (``--json``) carries
the same facts and the verdict in one object for programs; its shape is
documented in the README and versioned by ``schemaVersion``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from check_fabric._version import __version__
from check_fabric.checks import CheckResult, Verdict
from check_fabric.errors import CheckFabricError, ConfigError, IdentityLookupError, NvmlCallError
from check_fabric.imex import Channel, ImexReport, combine
from check_fabric.model import (
    ExitCode,
    GpuFabric,
    Identity,
    TopologyAnswer,
    health_summary_name,
    state_name,
)

JSON_SCHEMA_VERSION = 1


def discovered_line(count: int) -> str:
    return f"Discovered {count} GPU(s)"


def gpu_lines(gpu: GpuFabric) -> list[str]:
    """The reference's block for one GPU (one line when fabric is not supported)."""
    if gpu.fabric is None:
        return [f"GPU {gpu.index} ({gpu.uuid}): fabric NOT SUPPORTED"]
    info = gpu.fabric
    return [
        f"GPU {gpu.index} ({gpu.uuid})",
        f"  clusterUuid : {info.cluster_uuid}",
        f"  cliqueId    : {info.clique_id}",
        f"  state       : {state_name(info.state)} ({info.state})",
    ]


def check_line(check: CheckResult) -> str:
    status = {True: "ok", False: "MISMATCH", None: "skipped"}[check.passed]
    return f"{check.name}: {status}: {check.detail}"


def imex_check(report: ImexReport) -> CheckResult:
    """The channel check as one entry of the check list (``imex``)."""
    return CheckResult("imex", report.passed, report.detail())


def imex_lines(report: ImexReport) -> list[str]:
    """The channel block on stdout: a count, then one line per ``channel<N>``."""
    lines = [f"Discovered {len(report.channels)} IMEX channel(s) in {report.directory}"]
    return lines + [f"IMEX channel {c.number}: {c.describe()}" for c in report.channels]


def imex_status_line(report: ImexReport) -> str:
    status = {True: "ok", False: "FAILED", None: "not supported"}[report.passed]
    return f"imex: {status}: {report.detail()}"


def verdict_lines(verdict: Verdict) -> list[str]:
    """What stderr says after the report: failed checks always, the rest when asked for."""
    return [check_line(c) for c in verdict.checks if c.requested or c.passed is False]


class TextReport:
    """Writes the reference lines as GPUs are read, so a failure leaves partial output."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err

    def discovered(self, count: int) -> None:
        self._write(self._out, [discovered_line(count)])

    def gpu(self, gpu: GpuFabric) -> None:
        self._write(self._out, gpu_lines(gpu))

    def finish(self, verdict: Verdict) -> None:
        self._write(self._err, verdict_lines(verdict))

    def imex(self, report: ImexReport) -> None:
        """The channel block on stdout, its outcome on stderr."""
        self._write(self._out, imex_lines(report))
        self._write(self._err, [imex_status_line(report)])

    def note(self, line: str) -> None:
        """One line on stderr that explains the report, such as why no GPU was found."""
        self._write(self._err, [line])

    def fail(self, error: CheckFabricError) -> None:
        self._write(self._err, [str(error)])

    @staticmethod
    def _write(stream: TextIO, lines: Sequence[str]) -> None:
        if lines:
            stream.write("".join(line + "\n" for line in lines))
            stream.flush()


def _identity_doc(identity: Identity | None) -> dict[str, Any] | None:
    if identity is None:
        return None
    return {"clusterUuid": identity.cluster_uuid, "cliqueId": identity.clique_id}


def gpu_doc(gpu: GpuFabric) -> dict[str, Any]:
    if gpu.fabric is None:
        return {"index": gpu.index, "uuid": gpu.uuid, "fabric": {"supported": False}}
    info = gpu.fabric
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "fabric": {
            "supported": True,
            "clusterUuid": info.cluster_uuid,
            "cliqueId": info.clique_id,
            "state": state_name(info.state),
            "stateCode": info.state,
            "status": info.status,
            "healthMask": info.health_mask,
            "healthSummary": (
                None if info.health_summary is None else health_summary_name(info.health_summary)
            ),
            "api": info.api,
        },
    }


def topology_doc(answer: TopologyAnswer) -> dict[str, Any]:
    return {
        "url": answer.url,
        "node": answer.node,
        "inClique": answer.identity is not None,
        "identity": _identity_doc(answer.identity),
        "domain": answer.domain,
        "revision": answer.revision,
        "detail": answer.detail,
    }


def channel_doc(channel: Channel) -> dict[str, Any]:
    return {
        "channel": channel.number,
        "path": channel.path,
        "type": channel.kind,
        "major": channel.major,
        "minor": channel.minor,
        "open": channel.open,
        "usable": channel.usable,
        "problems": list(channel.problems),
    }


def imex_doc(report: ImexReport) -> dict[str, Any]:
    return {
        "directory": report.directory,
        "passed": report.passed,
        "channelsFound": len(report.channels),
        "major": report.major,
        "majorSource": report.major_source,
        "notSupported": report.not_supported,
        "problems": list(report.problems),
        "channels": [channel_doc(c) for c in report.channels],
    }


def error_doc(error: CheckFabricError) -> dict[str, Any]:
    doc: dict[str, Any] = {"message": str(error)}
    if isinstance(error, NvmlCallError):
        doc.update(
            kind="nvml",
            call=error.call,
            index=error.index,
            code=error.code,
            name=error.name,
            reason=error.message,
        )
    elif isinstance(error, IdentityLookupError):
        doc.update(kind="topology", url=error.url, reason=error.reason)
    elif isinstance(error, ConfigError):
        doc.update(kind="config", key=error.key, value=str(error.value), reason=error.reason)
    else:
        doc.update(kind="usage")
    return doc


_VERDICT_NAMES = {
    ExitCode.OK: "ok",
    ExitCode.ERROR: "error",
    ExitCode.NOT_SUPPORTED: "not_supported",
    ExitCode.MISMATCH: "mismatch",
}


def exit_code(
    verdict: Verdict | None,
    error: CheckFabricError | None,
    imex: ImexReport | None,
    *,
    fabric: bool,
) -> ExitCode:
    """The exit status: the fabric check's (when it ran), combined with the channel check's."""
    code = ExitCode.OK
    if fabric:
        code = ExitCode.ERROR if error is not None or verdict is None else verdict.exit_code
    elif error is not None:
        code = ExitCode.ERROR
    return code if imex is None else combine(code, imex.exit_code)


def report_doc(
    *,
    gpu_count: int | None,
    gpus: Sequence[GpuFabric],
    verdict: Verdict | None,
    topology: TopologyAnswer | None,
    error: CheckFabricError | None,
    api: str | None,
    imex: ImexReport | None = None,
    fabric: bool = True,
) -> dict[str, Any]:
    """The ``--json`` document (schema in the README).

    ``fabric`` is False for ``--imex-only``: no GPU was read, so the fabric fields stay empty.
    """
    code = exit_code(verdict, error, imex, fabric=fabric)
    checks = list(verdict.checks if verdict else ())
    if imex is not None:
        checks.append(imex_check(imex))
    if error is None and imex is not None and imex.passed is False:
        error_out: dict[str, Any] | None = {
            "kind": "imex",
            "message": f"imex: {imex.detail()}",
            "problems": list(imex.problems),
        }
    else:
        error_out = error_doc(error) if error is not None else None
    return {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "tool": "check-fabric",
        "version": __version__,
        "verdict": _VERDICT_NAMES[code],
        "exitCode": int(code),
        "gpuCount": gpu_count,
        "fabricApi": api,
        "identity": _identity_doc(verdict.identity) if verdict else None,
        "gpus": [gpu_doc(g) for g in gpus],
        "unsupported": list(verdict.unsupported) if verdict else [],
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in checks],
        "topology": topology_doc(topology) if topology is not None else None,
        "imex": imex_doc(imex) if imex is not None else None,
        "error": error_out,
    }
