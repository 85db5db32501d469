"""The ``nvml-mock-kwok`` command: fake GPU nodes on KWOK, equal to real mock nodes.

Verbs: ``plan`` (a topology document for N nodes), ``generate`` (the objects, as YAML),
``apply`` / ``delete`` (in a cluster), ``controller`` (scenarios on the fake nodes),
``record`` (recorded truth from NVIDIA's components) and ``versions`` (the components a
fixture was recorded with, and whether given binaries are those). Exit codes: 0 done,
1 runtime failure (API server, topology service, a component), 2 usage error, 3 invalid
input (topology, node count, clique shape, a profile without recorded truth), named in the
message, before anything is made.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from nvml_mock_protocol.logs import configure_logging
from nvml_mock_protocol.topology import TopologyError, read_topology_file

from nvml_mock_kwok import inputs
from nvml_mock_kwok._version import __version__
from nvml_mock_kwok.errors import KwokError, PlanError, TruthError
from nvml_mock_kwok.fleet import (
    DEFAULT_CLIQUE_SIZE,
    MAX_CLIQUE_GPUS,
    FakeNode,
    Fleet,
    fleet_from_document,
    plan_document,
)
from nvml_mock_kwok.kube import Credentials, Kube, load_kubeconfig
from nvml_mock_kwok.objects import NodeOptions, node_object, slice_objects, stage_objects
from nvml_mock_kwok.truth import COMPONENTS, STRATEGIES, Truth, load_truth, truth_dir, variants

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFIG: Final = 3

logger = logging.getLogger(__name__)


def _fleet_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", type=Path, help="topology document (YAML or JSON)")
    p.add_argument("--nodes", type=int, help="node count: the document's first N, or plan N")
    p.add_argument(
        "--clique-size",
        type=int,
        default=DEFAULT_CLIQUE_SIZE,
        help="nodes per clique when planning (default 18: NVL72 of 4-GPU trays)",
    )
    p.add_argument(
        "--cliques-per-domain",
        type=int,
        default=1,
        help="cliques per ComputeDomain when planning (default 1)",
    )
    p.add_argument("--prefix", default="kwok-gpu-", help="node name prefix when planning")
    p.add_argument("--profile", default="gb200", help="variant of recorded truth (default gb200)")
    p.add_argument(
        "--domain-profile",
        action="append",
        default=[],
        metavar="DOMAIN=PROFILE",
        help="another variant for one domain's nodes (repeatable)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="NODE",
        help="make only these nodes of the document (the rest are real mock nodes)",
    )
    p.add_argument(
        "--max-clique-gpus",
        type=int,
        default=MAX_CLIQUE_GPUS,
        help="GPUs one NVLink domain holds (default 72)",
    )
    p.add_argument(
        "--mig-strategy",
        choices=STRATEGIES,
        default="none",
        help="the device plugin's and GFD's MIG strategy (default none)",
    )
    p.add_argument("--cpu", default="64", help="node CPU capacity (default 64)")
    p.add_argument("--memory", default="512Gi", help="node memory capacity (default 512Gi)")
    p.add_argument("--pods", default="110", help="node pod capacity (default 110)")
    p.add_argument("--arch", default="amd64", help="kubernetes.io/arch (default amd64)")
    p.add_argument(
        "--taint", action="store_true", help="taint fake nodes kwok.x-k8s.io/node=fake:NoSchedule"
    )
    p.add_argument("--truth-dir", type=Path, help="fixtures directory (default: the package's)")


def _kube_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig",
        type=Path,
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig (env KUBECONFIG)",
    )
    p.add_argument("--context", help="kubeconfig context (default: current)")
    p.add_argument("--workers", type=int, default=32, help="parallel API requests (default 32)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nvml-mock-kwok", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    plan = verbs.add_parser("plan", help="write a topology document for --nodes nodes")
    _fleet_flags(plan)
    plan.add_argument("-o", "--output", default="-", help="file (default stdout)")
    gen = verbs.add_parser("generate", help="print the fleet's Stages, Nodes and ResourceSlices")
    _fleet_flags(gen)
    gen.add_argument("-o", "--output", default="-", help="file (default stdout)")
    gen.add_argument("--no-stages", action="store_true", help="leave the Stages out")
    app = verbs.add_parser("apply", help="make (or converge) the fleet in a cluster")
    _fleet_flags(app)
    _kube_flags(app)
    app.add_argument("--no-stages", action="store_true", help="leave the Stages out")
    app.add_argument(
        "--slices-after-ready",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="write the slices once KWOK has made every node Ready (waiting at most SECONDS; "
        "default 0: right after the nodes)",
    )
    dele = verbs.add_parser("delete", help="delete every fake node and slice made here")
    _kube_flags(dele)
    ctl = verbs.add_parser("controller", help="play the topology service's scenarios")
    _fleet_flags(ctl)
    _kube_flags(ctl)
    ctl.add_argument("--topology-url", required=True, help="topology service base URL")
    ctl.add_argument(
        "--report-token",
        default=os.environ.get("NVML_MOCK_REPORT_TOKEN") or None,
        help="bearer token of the service's write API (env NVML_MOCK_REPORT_TOKEN)",
    )
    ctl.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between reads of the scenario list (default 1)",
    )
    rec = verbs.add_parser("record", help="record a variant's truth from NVIDIA's components")
    rec.add_argument("--profile", required=True)
    rec.add_argument("--mig", help="MIG layout to stage (mig-parted's names)")
    rec.add_argument(
        "--bin-dir",
        type=Path,
        required=True,
        help="folder with " + ", ".join(COMPONENTS) + " and nvidia-cdi-hook",
    )
    rec.add_argument("--node", help="recorded node name (default rec-<profile>)")
    rec.add_argument("--kubeconfig", type=Path, help="API server for the DRA driver's slices")
    rec.add_argument("--timeout", type=float, default=60.0)
    rec.add_argument("-o", "--output", type=Path, help="fixture file (default: the package's)")
    ver = verbs.add_parser("versions", help="the recorded components' versions")
    ver.add_argument("--bin-dir", type=Path, help="check these binaries against the fixtures")
    ver.add_argument("--truth-dir", type=Path)
    return parser


def _kube(args: argparse.Namespace) -> Kube:
    if args.kubeconfig is None:
        raise PlanError("no kubeconfig: give --kubeconfig or set KUBECONFIG")
    return Kube(load_kubeconfig(args.kubeconfig, args.context))


def _pairs(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise PlanError(f"--domain-profile {item!r} is not DOMAIN=PROFILE")
        out[key] = value
    return out


def build_fleet(args: argparse.Namespace) -> tuple[Fleet, dict[str, Truth], NodeOptions]:
    """The fleet, its recorded truth and node options from the fleet flags; all checked."""
    domain_profiles = _pairs(args.domain_profile)
    root = args.truth_dir
    wanted = sorted({args.profile, *domain_profiles.values()})
    known = set(variants(root))
    truths: dict[str, Truth] = {}
    for variant in wanted:
        if variant not in known:
            raise TruthError(
                f"profile {variant!r} has no recorded truth (recorded: "
                f"{', '.join(sorted(known)) or 'none'}); record it with `nvml-mock-kwok record`"
            )
        truths[variant] = load_truth(variant, root)
    for truth in truths.values():
        truth.strategy(args.mig_strategy)
    options = NodeOptions(
        strategy=args.mig_strategy,
        cpu=inputs.check_quantity("--cpu", args.cpu),
        memory=inputs.check_quantity("--memory", args.memory),
        pods=inputs.check_pods(args.pods),
        arch=inputs.check_label_value("--arch", args.arch),
        taint=args.taint,
    )
    if args.nodes is not None:
        inputs.check_node_count("--nodes", args.nodes)
    if args.topology is not None:
        document = read_topology_file(args.topology)
        count = args.nodes
    else:
        if args.nodes is None:
            raise PlanError("give --topology or --nodes")
        inputs.check_node_name("--prefix", f"{args.prefix}{args.nodes - 1:05d}")
        document = plan_document(
            args.nodes,
            clique_size=args.clique_size,
            cliques_per_domain=args.cliques_per_domain,
            prefix=args.prefix,
        )
        count = None
    fleet = fleet_from_document(
        document,
        profile=args.profile,
        gpus_per_node={v: t.gpu_count for v, t in truths.items()},
        fabric_profiles=frozenset(v for v, t in truths.items() if t.identity.fabric is not None),
        nodes=count,
        domain_profiles=domain_profiles,
        max_clique_gpus=args.max_clique_gpus,
        only=args.only,
    )
    if len(fleet.nodes) > inputs.MAX_NODES:
        raise PlanError(
            f"--topology {str(args.topology)!r}: {len(fleet.nodes):,} nodes; at most "
            f"{inputs.MAX_NODES:,} (give --nodes to take its first ones)"
        )
    flag = "--prefix" if args.topology is None else f"--topology {str(args.topology)!r} node"
    for node in fleet.nodes:
        inputs.check_node_name(flag, node.name)
    return fleet, truths, options


def _write(text: str, output: str) -> None:
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).write_text(text, encoding="utf-8")


def _objects(
    fleet: Fleet, truths: dict[str, Truth], options: NodeOptions, stages: bool
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(stage_objects()) if stages else []
    for node in fleet.nodes:
        out.append(node_object(truths[node.variant], node, options))
        out.extend(slice_objects(truths[node.variant], node))
    return out


def _pairs_of(fleet: Fleet, truths: dict[str, Truth]) -> list[tuple[FakeNode, Truth]]:
    return [(node, truths[node.variant]) for node in fleet.nodes]


def _versions(args: argparse.Namespace) -> int:
    from nvml_mock_kwok.record import component_versions

    root = args.truth_dir or truth_dir()
    bad = 0
    for variant in variants(root):
        truth = load_truth(variant, root)
        recorded = dict(truth.components)
        line = ", ".join(f"{n} {c['version']}" for n, c in sorted(recorded.items()))
        print(f"{variant}: {line}")
        if args.bin_dir is not None:
            have = component_versions(args.bin_dir, sorted(recorded))
            for name, info in sorted(recorded.items()):
                if (have[name]["version"], have[name]["revision"]) != (
                    info["version"],
                    info["revision"],
                ):
                    bad += 1
                    print(
                        f"  {name}: recorded {info['version']} ({info['revision'][:12]}), "
                        f"given {have[name]['version']} ({have[name]['revision'][:12]})",
                        file=sys.stderr,
                    )
    return EXIT_FAILURE if bad else EXIT_OK


def _record(args: argparse.Namespace) -> int:
    from nvml_mock_kwok.record import Recording, record_variant, variant_name

    kube = Kube(load_kubeconfig(args.kubeconfig)) if args.kubeconfig else None
    try:
        data = record_variant(
            Recording(
                profile=args.profile,
                node=args.node or f"rec-{args.profile}",
                bin_dir=args.bin_dir,
                mig=args.mig,
                kube=kube,
                timeout=args.timeout,
            )
        )
    finally:
        if kube is not None:
            kube.close()
    out = args.output or truth_dir() / f"{variant_name(args.profile, args.mig)}.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    logger.info("recorded %s into %s", data["variant"], out)
    return EXIT_OK


def _check_run_flags(args: argparse.Namespace) -> None:
    """The flags of a run against a cluster, checked before the kubeconfig is even read."""
    if getattr(args, "workers", None) is not None:
        inputs.check_workers(args.workers)
    if getattr(args, "slices_after_ready", None) is not None:
        inputs.check_seconds("--slices-after-ready", args.slices_after_ready)
    if getattr(args, "interval", None) is not None and not (
        math.isfinite(args.interval) and 0 < args.interval <= 3600
    ):
        raise PlanError(f"--interval {args.interval!r}: must be more than 0 and at most 3600")


def _dispatch(args: argparse.Namespace) -> int:
    _check_run_flags(args)
    if args.verb == "versions":
        return _versions(args)
    if args.verb == "record":
        return _record(args)
    if args.verb == "delete":
        from nvml_mock_kwok.apply import delete_fleet

        with _kube(args) as kube:
            logger.info("deleted %d object(s)", delete_fleet(kube, workers=args.workers))
        return EXIT_OK
    fleet, truths, options = build_fleet(args)
    if args.verb == "plan":
        _write(yaml.safe_dump(fleet.document.to_data(), sort_keys=False), args.output)
        return EXIT_OK
    if args.verb == "generate":
        objects = _objects(fleet, truths, options, not args.no_stages)
        _write(yaml.safe_dump_all(objects, sort_keys=False), args.output)
        return EXIT_OK
    with _kube(args) as kube:
        return _in_cluster(args, kube, fleet, truths, options)


def _in_cluster(
    args: argparse.Namespace,
    kube: Kube,
    fleet: Fleet,
    truths: dict[str, Truth],
    options: NodeOptions,
) -> int:
    """``apply`` or ``controller`` on one API server client, closed by the caller."""
    if args.verb == "apply":
        from nvml_mock_kwok.apply import apply_fleet

        result = apply_fleet(
            kube,
            _pairs_of(fleet, truths),
            options,
            workers=args.workers,
            with_stages=not args.no_stages,
            slices_after_ready=args.slices_after_ready,
        )
        if result.ready_seconds is not None:
            logger.info("every node Ready at %.1fs", result.ready_seconds)
        logger.info(
            "applied %d node(s) (all written at %.1fs), %d slice(s), %d stage(s) in %.1fs; "
            "%d object(s) made, the rest converged",
            result.nodes,
            result.nodes_seconds,
            result.slices,
            result.stages,
            result.seconds,
            result.created,
        )
        return EXIT_OK
    from nvml_mock_kwok.controller import Controller

    service = Kube(
        Credentials(args.topology_url.rstrip("/"), args.report_token, None, False, None, None)
    )
    controller = Controller(
        kube,
        service,
        _pairs_of(fleet, truths),
        options,
        interval=args.interval,
        workers=args.workers,
    )
    signal.signal(signal.SIGTERM, lambda *_: controller.stop())
    logger.info("playing scenarios on %d fake node(s) from %s", len(fleet.nodes), args.topology_url)
    try:
        controller.run()
    except KeyboardInterrupt:
        controller.stop()
    finally:
        service.close()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        return _dispatch(args)
    except (PlanError, TruthError, TopologyError) as exc:
        logger.error("%s", exc)
        return EXIT_CONFIG
    except KwokError as exc:
        logger.error("%s", exc)
        return EXIT_FAILURE
