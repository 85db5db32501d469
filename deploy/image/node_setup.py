#!/usr/bin/env python3
"""Per-node setup for the staging DaemonSet: stage the overlay, publish CDI, label the node.

One pod per node runs ``nvml-mock-node-setup run``. It calls the engine's own
``nvml-mock-engine stage`` (so the overlay a node gets is exactly what the engine's
tests check), copies the CDI spec the engine wrote into the runtime's CDI directory
(atomically: containerd may read it at any moment), and labels the node
``nvidia.com/gpu.present=true`` through the API server with the pod's service account.
It then stays up and re-stages if the overlay disappears (a node clean-up, a wiped
disk), because the NRI plugin keeps injecting whatever sits at that path.

``nvml-mock-node-setup check`` is the readiness probe: it exits 0 only when the
overlay is complete, so ``kubectl rollout status`` and ``helm --wait`` mean "every
node is staged".

Stdlib only: it runs with the engine image's interpreter and needs no client library
for one PATCH. Exit codes: 0 done (or stopped by SIGTERM), 1 a step failed,
2 usage, 3 bad configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from nvml_mock_protocol import logs, names

logger = logging.getLogger("nvml_mock_node_setup")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 3

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CDI_SOURCE = f"{names.OVERLAY_CDI_DIR}/nvml-mock.yaml"
REQUIRED_FILES = (
    f"{names.OVERLAY_LIB_DIR}/{names.LIBRARY_NAME}",
    f"{names.OVERLAY_CONFIG_DIR}/{names.STATE_FILE_NAME}",
    f"{names.OVERLAY_BIN_DIR}/nvidia-smi",
    f"{names.OVERLAY_BIN_DIR}/check-fabric",
)
"""What a complete overlay holds; the readiness probe checks each one."""

LABEL_ATTEMPTS = 6
ENGINE_FLAG_ENV = frozenset(
    {
        "NVML_MOCK_PROFILE",
        "NVML_MOCK_GPU_COUNT",
        names.ENV_NODE_NAME,
        names.ENV_OVERLAY_MOUNT_PATH,
    }
)
"""Env twins of the flags ``stage`` is given; not passed on to the engine."""


class ConfigError(Exception):
    """A flag or env value that cannot be used; the message names it."""


class StepError(Exception):
    """A setup step failed at run time; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    """Configuration of one run, from flags with env twins (the flag wins)."""

    overlay_dir: Path
    """Overlay directory on the node (mounted at the same path in the pod)."""
    mount_path: str
    """Where containers see the overlay; the engine writes it into the launchers."""
    profile: str
    """GPU profile handed to ``nvml-mock-engine stage --profile``."""
    count: int | None
    """GPUs per node; None takes the profile's default."""
    node_name: str
    """This node's name (downward API): seeds the rendered state and is the node labelled."""
    cdi_spec_path: Path | None
    """Where the CDI spec is published; None publishes none."""
    node_labels: Mapping[str, str]
    """Labels set on the node; empty sets none and never calls the API."""
    stage_command: str
    """The engine's command line tool (split like a shell would)."""
    recheck_seconds: float
    """How often the overlay is checked and re-staged if incomplete."""
    api_server: str
    """Kubernetes API base URL; in a pod, from KUBERNETES_SERVICE_HOST/PORT."""
    service_account_dir: Path
    """Directory holding the service account's ``token`` and ``ca.crt``."""


def _env(environ: Mapping[str, str], key: str, default: str = "") -> str:
    value = environ.get(key, "")
    return value if value != "" else default


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--node-labels / NVML_MOCK_NODE_LABELS: {item!r} is not KEY=VALUE")
        labels[key] = value
    return labels


def _in_cluster_api(environ: Mapping[str, str]) -> str:
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-node-setup",
        description="Stage the nvml-mock overlay on this node, publish its CDI spec, "
        "label the node.",
    )
    parser.add_argument(
        "command", choices=["run", "check"], help="run: set up and stay; check: probe"
    )
    parser.add_argument("--overlay-dir", help="NVML_MOCK_OVERLAY_HOST_PATH (/var/lib/nvml-mock)")
    parser.add_argument(
        "--mount-path", help=f"NVML_MOCK_OVERLAY_MOUNT_PATH ({names.OVERLAY_MOUNT_PATH})"
    )
    parser.add_argument("--profile", help="NVML_MOCK_PROFILE (required for run)")
    parser.add_argument("--count", help='NVML_MOCK_GPU_COUNT ("" = the profile\'s default)')
    parser.add_argument("--node-name", help="NODE_NAME (required for run)")
    parser.add_argument(
        "--cdi-spec-path",
        help=f'NVML_MOCK_CDI_SPEC_HOST_PATH ({names.CDI_SPEC_HOST_PATH}; "none" publishes none)',
    )
    parser.add_argument("--node-labels", help="NVML_MOCK_NODE_LABELS, CSV of KEY=VALUE")
    parser.add_argument("--stage-command", help="NVML_MOCK_STAGE_COMMAND (nvml-mock-engine)")
    parser.add_argument("--recheck-seconds", help="NVML_MOCK_RECHECK_SECONDS (30)")
    parser.add_argument("--api-server", help="NVML_MOCK_KUBE_API (in-cluster address)")
    parser.add_argument("--service-account-dir", help=f"({SERVICE_ACCOUNT_DIR})")
    parser.add_argument("--log-format", help="NVML_MOCK_LOG_FORMAT: text|json (text)")
    parser.add_argument("--log-level", help="NVML_MOCK_LOG_LEVEL (info)")
    return parser


def load_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Settings from flags, then env twins, then defaults; raise ConfigError naming a bad one."""

    def pick(flag: str | None, key: str, default: str = "") -> str:
        return flag if flag is not None else _env(environ, key, default)

    count_text = pick(args.count, "NVML_MOCK_GPU_COUNT").strip()
    count: int | None = None
    if count_text:
        try:
            count = int(count_text)
        except ValueError:
            count = 0
        if not 1 <= count <= 64:
            raise ConfigError(f"--count / NVML_MOCK_GPU_COUNT: {count_text!r} is not 1..64")
    recheck_text = pick(args.recheck_seconds, "NVML_MOCK_RECHECK_SECONDS", "30")
    try:
        recheck = float(recheck_text)
    except ValueError:
        recheck = -1.0
    if recheck <= 0:
        raise ConfigError(
            f"--recheck-seconds / NVML_MOCK_RECHECK_SECONDS: {recheck_text!r} is not > 0"
        )
    cdi = pick(args.cdi_spec_path, "NVML_MOCK_CDI_SPEC_HOST_PATH", names.CDI_SPEC_HOST_PATH)
    settings = Settings(
        overlay_dir=Path(
            pick(args.overlay_dir, names.ENV_OVERLAY_HOST_PATH, names.OVERLAY_HOST_PATH)
        ),
        mount_path=pick(args.mount_path, names.ENV_OVERLAY_MOUNT_PATH, names.OVERLAY_MOUNT_PATH),
        profile=pick(args.profile, "NVML_MOCK_PROFILE"),
        count=count,
        node_name=pick(args.node_name, names.ENV_NODE_NAME),
        cdi_spec_path=None if cdi in ("", "none") else Path(cdi),
        node_labels=_parse_labels(pick(args.node_labels, "NVML_MOCK_NODE_LABELS")),
        stage_command=pick(args.stage_command, "NVML_MOCK_STAGE_COMMAND", "nvml-mock-engine"),
        recheck_seconds=recheck,
        api_server=pick(args.api_server, "NVML_MOCK_KUBE_API", _in_cluster_api(environ)),
        service_account_dir=Path(pick(args.service_account_dir, "", SERVICE_ACCOUNT_DIR)),
    )
    if args.command == "run":
        if not settings.profile:
            raise ConfigError("--profile / NVML_MOCK_PROFILE: required")
        if not settings.node_name:
            raise ConfigError("--node-name / NODE_NAME: required (set it from spec.nodeName)")
        if settings.node_labels and not settings.api_server:
            raise ConfigError(
                "--api-server / NVML_MOCK_KUBE_API: required to label the node "
                "(not in a pod: KUBERNETES_SERVICE_HOST is unset)"
            )
    return settings


def missing_files(overlay_dir: Path) -> list[str]:
    """The required overlay files that are absent, relative to the overlay."""
    return [rel for rel in REQUIRED_FILES if not (overlay_dir / rel).is_file()]


def stage(settings: Settings) -> None:
    """Run ``nvml-mock-engine stage`` for this node into the overlay directory."""
    argv = [
        *shlex.split(settings.stage_command),
        "stage",
        str(settings.overlay_dir),
        "--profile",
        settings.profile,
    ]
    if settings.count is not None:
        argv += ["--count", str(settings.count)]
    argv += ["--node", settings.node_name, "--mount-path", settings.mount_path]
    logger.info("staging the overlay: %s", " ".join(argv))
    # Everything is passed as flags; the engine's env twins of those flags are dropped so
    # that an empty value (GPU count "" = the profile's default) cannot reach it as "".
    environ = {k: v for k, v in os.environ.items() if k not in ENGINE_FLAG_ENV}
    try:
        result = subprocess.run(argv, check=False, env=environ)
    except OSError as exc:
        raise StepError(f"cannot run {settings.stage_command!r}: {exc}") from exc
    if result.returncode != 0:
        raise StepError(f"{' '.join(argv)} exited {result.returncode}")
    missing = missing_files(settings.overlay_dir)
    if missing:
        raise StepError(f"staging finished but the overlay lacks {', '.join(missing)}")


def publish_cdi_spec(settings: Settings) -> None:
    """Copy the overlay's CDI spec to the runtime's CDI directory, replacing it atomically."""
    if settings.cdi_spec_path is None:
        return
    source = settings.overlay_dir / CDI_SOURCE
    if not source.is_file():
        logger.warning(
            "the overlay holds no CDI spec (%s); CDI device injection falls back to raw", source
        )
        return
    target = settings.cdi_spec_path
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(source.read_bytes())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StepError(f"cannot publish the CDI spec to {target}: {exc}") from exc
    logger.info("published the CDI spec %s", target)


def label_node(settings: Settings) -> None:
    """Merge-patch the node's labels, retrying transient failures with backoff."""
    if not settings.node_labels:
        return
    url = (
        f"{settings.api_server.rstrip('/')}/api/v1/nodes/"
        f"{urllib.parse.quote(settings.node_name, safe='')}"
    )
    body = json.dumps({"metadata": {"labels": dict(settings.node_labels)}}).encode()
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    token_file = settings.service_account_dir / "token"
    context: ssl.SSLContext | None = None
    if url.startswith("https:"):
        ca = settings.service_account_dir / "ca.crt"
        context = ssl.create_default_context(cafile=str(ca) if ca.is_file() else None)
    delay = 1.0
    for attempt in range(1, LABEL_ATTEMPTS + 1):
        if token_file.is_file():
            # Re-read on each attempt: projected tokens rotate.
            headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
        request = urllib.request.Request(url, data=body, headers=headers, method="PATCH")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                response.read()
            logger.info("labelled node %s: %s", settings.node_name, dict(settings.node_labels))
            return
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code in (401, 403, 404, 422):
                hint = (
                    " (the service account needs patch on nodes, for its own node only)"
                    if exc.code == 403
                    else ""
                )
                raise StepError(
                    f"labelling node {settings.node_name}: HTTP {exc.code}{hint}: {detail}"
                ) from None
            reason = f"HTTP {exc.code}: {detail}"
        except (urllib.error.URLError, OSError) as exc:
            reason = str(getattr(exc, "reason", exc))
        if attempt == LABEL_ATTEMPTS:
            raise StepError(
                f"labelling node {settings.node_name}: gave up after {attempt} attempts: {reason}"
            )
        logger.warning("labelling node failed (%s); retrying in %.0fs", reason, delay)
        time.sleep(delay)
        delay = min(delay * 2, 15.0)


def run(settings: Settings, stop: threading.Event) -> int:
    """Set the node up, then keep the overlay complete until ``stop`` is set."""
    stage(settings)
    publish_cdi_spec(settings)
    label_node(settings)
    logger.info("node %s is set up; watching %s", settings.node_name, settings.overlay_dir)
    while not stop.wait(settings.recheck_seconds):
        missing = missing_files(settings.overlay_dir)
        if missing:
            logger.warning("the overlay lost %s; staging it again", ", ".join(missing))
            stage(settings)
            publish_cdi_spec(settings)
    logger.info("stopping")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    log_format = args.log_format or _env(environ, names.ENV_LOG_FORMAT, logs.DEFAULT_LOG_FORMAT)
    log_level = args.log_level or _env(environ, names.ENV_LOG_LEVEL, "info")
    try:
        logs.configure_logging(log_level, log_format)
    except ValueError as exc:
        print(f"nvml-mock-node-setup: bad log settings: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        settings = load_settings(args, environ)
    except ConfigError as exc:
        logger.error("bad configuration: %s", exc)
        return EXIT_CONFIG
    if args.command == "check":
        missing = missing_files(settings.overlay_dir)
        if missing:
            print(f"overlay {settings.overlay_dir} lacks: {', '.join(missing)}", file=sys.stderr)
            return EXIT_FAILURE
        return EXIT_OK
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return run(settings, stop)
    except StepError as exc:
        logger.error("%s", exc)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
