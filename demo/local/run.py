"""The local demo: node-wide NRI injection and ComputeDomain identity on one machine.

What the kind demo shows on a cluster, shown here with no Docker and no Kubernetes: four
simulated nodes, each with its own containerd stand-in and its own NRI plugin process, one
topology service, one staged overlay. Ordinary "gpu-agent" workloads (no GPU request, no
MOCK_* env, no mounts) see GPUs and their node's clique through injection alone.

Acts, each with assertions: injection (with a ComputeDomain, the workloads also opt in to
IMEX channels and check them, where the demo may make device nodes); a rebind (the topology
file changes: new workloads see the new clique, running ones keep what they were given); an
Xid on one node; an allocation (a workload given GPU 2 by NVIDIA_VISIBLE_DEVICES sees exactly
that GPU, and the node's nvidia-smi shows its process and memory while it runs, and not
after); CUDA in a pod (a pod annotated for the CUDA runtime work-alike sees its GPU, allocates
and copies through it, and its next call fails once its GPU falls off the bus); GPU metrics
(an exporter's series of one GPU under dcgm-exporter's names, before and after a thermal fault
and an Xid); a scenario (a 50% Xid scenario in the scenario document:
each node's agent applies it, new workloads' nvidia-smi shows which nodes got it, the
scenario status says the same, and removing it clears it); a fault (the topology service
stops: new workloads keep the cached identity; a plugin stops: its node's new workloads get
no GPUs, and its readiness probe is what reveals it).

Knobs (env, or the flags below): GPU_PROFILE, GPU_COUNT, WITH_COMPUTE_DOMAIN, NODE_COUNT.
Exit status: 0 every assertion held, 1 one did not, 3 bad knobs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nvml_mock_live as live
from cluster import Node, Process, TopologyService, free_port, http_get, wait_until
from cuda_act import CudaRow, cuda_table, run_cuda_act
from imex_act import ImexRow, imex_table, run_imex_act
from metrics import act_metrics
from nvml_mock_engine.errors import NvmlEngineError
from nvml_mock_engine.profiles import load_profile
from nvml_mock_live.scenarios import parse_scenarios
from nvml_mock_node.runtime import loader_name
from nvml_mock_protocol import names
from nvml_mock_protocol.topology import parse_topology
from workload import WORKLOAD_NAMESPACE, Isolation, Outcome, create_and_run, recheck

REPO = Path(__file__).resolve().parents[2]
DOMAIN = ("node-wide-domain", "00000000-0000-0000-0000-0000000000cd")
REBIND = ("rebinder", "00000000-0000-0000-0000-0000000000ff", 99)
MARKER = ".nvml-mock-demo"
XID_FALLEN_OFF_BUS = 79
SCENARIO = "xid-79-half"
SCENARIO_YAML = f"""\
version: 1
scenarios:
  - name: {SCENARIO}
    selector: {{percent: 50, seed: 1}}
    gpus: [0]
    apply: {{fault: fallen-off-bus}}
    duration: 1h
"""
NO_SCENARIOS = "version: 1\nscenarios: []\n"
EVENT_WAITER = """\
import ctypes
import pynvml
pynvml.nvmlInit()
events = pynvml.nvmlEventSetCreate()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
for handle in handles:
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
print("waiting", flush=True)
event = pynvml.nvmlEventSetWait_v2(events, 60000)
address = ctypes.cast(event.device, ctypes.c_void_p).value
index = [ctypes.cast(h, ctypes.c_void_p).value for h in handles].index(address)
print(f"xid {event.eventData} gpu {index}", flush=True)
"""
"""The event waiter a monitoring agent runs: nvidia-ml-py blocked in nvmlEventSetWait."""


@dataclass(frozen=True)
class Knobs:
    profile: str
    gpu_count: int | None
    compute_domain: bool
    nodes: int
    workdir: Path
    mount_namespaces: bool = True


@dataclass
class Verdicts:
    """Every assertion the demo makes, in order."""

    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def check(self, ok: bool, what: str) -> bool:
        mark = "ok  " if ok else "FAIL"
        say(f"  [{mark}] {what}")
        if not ok:
            self.failures.append(what)
        return ok


def say(text: str) -> None:
    print(text, flush=True)


def node_names(count: int) -> list[str]:
    """The seed's kind worker names."""
    base = "nvml-mock-node-wide-demo-worker"
    return [base if i == 1 else f"{base}{i}" for i in range(1, count + 1)]


def expected_clique(index: int, count: int) -> int:
    """First half of the nodes in clique 0, the rest in clique 1 (the seed's layout)."""
    return 0 if index < (count + 1) // 2 else 1


def topology_yaml(nodes: Sequence[str]) -> str:
    halves: dict[int, list[str]] = {0: [], 1: []}
    for i, node in enumerate(nodes):
        halves[expected_clique(i, len(nodes))].append(node)
    lines = ["version: 1", "domains:", f"  - name: {DOMAIN[0]}", f'    uuid: "{DOMAIN[1]}"']
    lines.append("    cliques:")
    for clique, members in halves.items():
        if members:
            lines.append(f"      - id: {clique}")
            lines.append("        nodes: [" + ", ".join(members) + "]")
    return "\n".join(lines) + "\n"


def rebind_yaml(nodes: Sequence[str]) -> str:
    name, uuid, clique = REBIND
    return (
        f'version: 1\ndomains:\n  - name: {name}\n    uuid: "{uuid}"\n    cliques:\n'
        f"      - id: {clique}\n        nodes: [{', '.join(nodes)}]\n"
    )


def _clip(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _imex_cell(outcome: Outcome) -> str:
    """``usable/found`` IMEX channels as check-fabric counted them; ``-`` when not checked."""
    report = outcome.imex
    if report is None:
        return "-"
    channels = report.get("channels")
    usable = (
        sum(1 for c in channels if isinstance(c, dict) and c.get("usable"))
        if isinstance(channels, list)
        else 0
    )
    return f"{usable}/{report.get('channelsFound', 0)}"


def table(
    outcomes: Sequence[Outcome], verdicts: Sequence[str], acts: Sequence[str] | None = None
) -> None:
    """Print one row per workload; with ``acts``, a leading ACT column."""
    head = ("NODE", "GPUS SEEN", "CLIQUEID", "CLUSTERUUID", "IMEX", "VERDICT")
    rows = [(("ACT", *head) if acts else head)]
    for i, (outcome, verdict) in enumerate(zip(outcomes, verdicts, strict=True)):
        rows.append(
            (
                *((acts[i],) if acts else ()),
                outcome.node,
                str(len(outcome.gpus)),
                "-" if outcome.clique is None else str(outcome.clique),
                outcome.cluster_uuid or "-",
                _imex_cell(outcome),
                verdict,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


class Demo:
    """Owns every process it starts, and stops them all on the way out."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.work = knobs.workdir
        self.overlay = self.work / "overlay"
        self.document = self.work / "topology" / "topology.yaml"
        self.scenarios = self.work / "scenarios" / "scenarios.yaml"
        self.token = self.work / "scenarios" / "write-token"
        self.agents: list[Process] = []
        self.surfaces_agent: Process | None = None
        """The staged overlay's agent without a topology service: keeps its MIG-dependent
        surfaces true for the whole run, as the staging DaemonSet's agent does on a node."""
        self.names = node_names(knobs.nodes)
        self.service: TopologyService | None = None
        self.nodes: list[Node] = []
        self.workloads: list[int] = []
        """Process groups of the long-running workloads, stopped on the way out."""
        self.isolation = Isolation(None)
        self.socket_root: Path | None = None
        self.verdicts = Verdicts()
        self.summary: list[tuple[str, Outcome, str]] = []
        self.acts = 0
        self.imex = False
        self.imex_rows: list[ImexRow] = []
        self.cuda_rows: list[CudaRow] = []
        """Whether IMEX channels were staged, so ComputeDomain workloads opt in and check them."""

    def act(self, title: str) -> None:
        self.acts += 1
        say(f"\n== Act {self.acts}: {title}")

    def record(self, act: str, outcomes: Sequence[Outcome], verdicts: Sequence[str]) -> None:
        table(outcomes, verdicts)
        self.summary.extend((act, o, v) for o, v in zip(outcomes, verdicts, strict=True))

    async def run(self) -> int:
        try:
            await self.setup()
            first = await self.act_inject()
            if self.knobs.compute_domain:
                await self.act_rebind(first)
            await self.act_xid()
            await self.act_allocation()
            self.cuda_rows = await run_cuda_act(self)
            await self.act_imex()
            await act_metrics(self)
            if self.service is not None:
                await self.act_scenario()
            await self.act_fault()
        finally:
            await self.teardown()
        took = time.monotonic() - self.verdicts.started
        if self.summary:
            say("\n== Summary")
            table(
                [row[1] for row in self.summary],
                [row[2] for row in self.summary],
                [row[0] for row in self.summary],
            )
        if self.imex_rows:
            say("\n== IMEX domain")
            imex_table(self.imex_rows, say)
        if self.cuda_rows:
            say("\n== CUDA in a pod")
            cuda_table(self.cuda_rows, say)
        if self.verdicts.failures:
            say(f"\nDEMO FAILED ({len(self.verdicts.failures)} assertion(s), {took:.1f}s):")
            for failure in self.verdicts.failures:
                say(f"  - {failure}")
            say(f"Logs: {self.work / 'logs'} and {self.work / 'nodes'}/*/nri-plugin.log")
            return 1
        say(f"\nDEMO PASSED: every assertion held ({took:.1f}s).")
        return 0

    # -- set-up ---------------------------------------------------------------------------
    async def setup(self) -> None:
        k = self.knobs
        count = "profile default" if k.gpu_count is None else str(k.gpu_count)
        say(
            f"nvml-mock local demo: {k.nodes} nodes, profile {k.profile} ({count} GPUs), "
            f"ComputeDomain {'on' if k.compute_domain else 'off'}"
        )
        marker = self.work / MARKER
        if self.work.exists() and any(self.work.iterdir()):
            if not marker.exists():
                raise RuntimeError(
                    f"{self.work} exists and is not a previous demo's work directory; "
                    "choose another DEMO_WORKDIR (the demo clears its own only)"
                )
            shutil.rmtree(self.work)
        (self.work / "logs").mkdir(parents=True)
        marker.write_text("work directory of the nvml-mock local demo; cleared on each run\n")
        self.isolation = (
            await Isolation.probe()
            if k.mount_namespaces
            else Isolation(None, "turned off with --no-mount-namespaces")
        )
        if self.isolation.unshare is None:
            say(
                "  ! mount namespaces are not permitted here "
                f"({self.isolation.reason}); to get them, {self.isolation.how_to_enable}."
            )
            say("    Carrying on with the overlay at its host path in place of /opt/nvml-mock.")
        else:
            say("  workloads get their mounts in private mount namespaces (unshare)")

        say("\n== Staging the overlay (once, shared by every node)")
        argv = [sys.executable, "-m", "nvml_mock_engine", "stage", str(self.overlay)]
        argv += ["--profile", k.profile]
        if k.gpu_count is not None:
            argv += ["--count", str(k.gpu_count)]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        (self.work / "logs" / "stage.log").write_bytes(out)
        if proc.returncode != 0:
            raise RuntimeError(f"staging failed:\n{out.decode(errors='replace')}")
        say(
            f"  staged {self.overlay} ({', '.join(sorted(p.name for p in self.overlay.iterdir()))})"
        )
        await self.start_surfaces_agent()
        channels = self.overlay / names.OVERLAY_DEV_DIR / names.IMEX_CHANNELS_DIR
        self.imex = k.compute_domain and channels.is_dir() and any(channels.iterdir())
        if self.imex:
            count = len(list(channels.iterdir()))
            say(f"  {count} IMEX channel nodes in dev/{names.IMEX_CHANNELS_DIR}/")
        elif k.compute_domain:
            say(
                "  ! no IMEX channel nodes staged (making device nodes needs root with "
                "CAP_MKNOD, and no real NVIDIA driver): the channel check is skipped"
            )

        topology_url = ""
        if k.compute_domain:
            say("\n== Starting the topology service")
            self.document.parent.mkdir(parents=True)
            write_atomically(self.document, topology_yaml(self.names))
            self.scenarios.parent.mkdir(parents=True)
            write_atomically(self.scenarios, NO_SCENARIOS)
            self.token.write_text(os.urandom(16).hex())
            self.token.chmod(0o600)
            self.service = TopologyService(
                self.document,
                self.work,
                extra=(
                    "--scenarios-file",
                    str(self.scenarios),
                    "--write-token-file",
                    str(self.token),
                ),
            )
            await self.service.start()
            topology_url = self.service.url
            say(f"  {self.service.url} serves revision {self.service.revision()}")
            for i, name in enumerate(self.names):
                say(f"    {name}: clique {expected_clique(i, k.nodes)} of {DOMAIN[0]}")

        say(f"\n== Starting {k.nodes} nodes (containerd stand-in + NRI plugin each)")
        sockets = self.work / "nodes"
        if len(str(sockets)) + 48 > 100:  # AF_UNIX paths stop at 108 bytes
            self.socket_root = Path(tempfile.mkdtemp(prefix="nvml-mock-demo-"))
            sockets = self.socket_root
        for i, name in enumerate(self.names):
            node = Node(
                name,
                self.work / "nodes" / name,
                self.overlay,
                topology_url,
                device_namespaces=(WORKLOAD_NAMESPACE,),
            )
            if self.socket_root is not None:
                node.socket_dir = sockets / f"n{i + 1}"
            self.nodes.append(node)
            await node.start_runtime()
        await asyncio.gather(*(node.start_plugin() for node in self.nodes))
        for node in self.nodes:
            await wait_until(
                f"{node.name}'s plugin to be ready", lambda n=node: n.readyz()[0] == 200, 20
            )
            say(f"  {node.name}: plugin registered, /readyz 200 ({node.health_url})")

    async def start_surfaces_agent(self) -> None:
        """The overlay's node agent, started right after staging and without a topology
        service: MIG layouts changed through NVML reach its capability files at once."""
        port = free_port()
        argv = [sys.executable, "-m", "nvml_mock_engine", "agent"]
        argv += ["--overlay-path", str(self.overlay), "--probe-addr", f"127.0.0.1:{port}"]
        self.surfaces_agent = await Process.start(
            "agent", argv, self.work / "logs" / "surfaces-agent.log"
        )
        await wait_until(
            "the overlay's agent to be ready",
            lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200,
            20,
        )
        say("  its node agent keeps the MIG-dependent surfaces true (no topology service needed)")

    async def teardown(self) -> None:
        for pid in self.workloads:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        await asyncio.gather(*(agent.stop() for agent in self.agents), return_exceptions=True)
        if self.surfaces_agent is not None:
            await self.surfaces_agent.stop()
        await asyncio.gather(*(node.stop() for node in self.nodes), return_exceptions=True)
        if self.service is not None:
            await self.service.stop()
        if self.socket_root is not None:
            shutil.rmtree(self.socket_root, ignore_errors=True)

    # -- the acts -------------------------------------------------------------------------
    def expected_gpus(self, outcome: Outcome) -> int:
        return self.knobs.gpu_count or len(outcome.gpus)

    def judge(self, outcome: Outcome, clique: int | None, uuid: str | None) -> str:
        """The verdict for one workload that should have been injected."""
        v = self.verdicts
        ok = v.check(outcome.injected, f"{outcome.node}: {outcome.pod} got the overlay mount")
        ok &= v.check(
            len(outcome.gpus) > 0 and len(outcome.gpus) == self.expected_gpus(outcome),
            f"{outcome.node}: nvidia-smi -L lists {len(outcome.gpus)} GPU(s)",
        )
        if clique is None:
            ok &= v.check(
                outcome.fabric_verdict == "not_supported" and outcome.exit_code == 2,
                f"{outcome.node}: check-fabric: fabric not supported (exit {outcome.exit_code})",
            )
        else:
            ok &= v.check(
                outcome.fabric_verdict == "ok"
                and outcome.clique == clique
                and outcome.cluster_uuid == uuid,
                f"{outcome.node}: check-fabric sees clique {outcome.clique} of "
                f"{outcome.cluster_uuid} (want {clique} of {uuid})",
            )
        if self.imex:
            report = outcome.imex or {}
            ok &= v.check(
                outcome.imex_dir is not None
                and report.get("passed") is True
                and report.get("channelsFound") == self.imex_channels,
                f"{outcome.node}: check-fabric --imex: {report.get('channelsFound', 0)} of "
                f"{self.imex_channels} IMEX channel(s) usable, major {report.get('major')} from "
                f"{report.get('majorSource', '-')}",
            )
        return "PASS" if ok else "FAIL"

    @property
    def imex_channels(self) -> int:
        channels = self.overlay / names.OVERLAY_DEV_DIR / names.IMEX_CHANNELS_DIR
        return len(list(channels.iterdir())) if self.imex else 0

    async def new_workloads(
        self, *, keep_running: bool = False, own_live_layer: bool = False
    ) -> list[Outcome]:
        """One new gpu-agent workload per node, created at once; kept ones are tracked. With
        *own_live_layer* each reads its node's own live layer (``live_of``)."""
        return list(
            await asyncio.gather(
                *(
                    create_and_run(
                        node.runtime,  # type: ignore[arg-type]
                        node.name,
                        self.isolation,
                        self.overlay,
                        keep_running=keep_running,
                        started=self.workloads,
                        extra_env=(
                            {"MOCK_NVML_LIVE": str(self.live_of(node))} if own_live_layer else None
                        ),
                        annotations=(
                            {names.ANNOTATION_IMEX_CHANNELS: "true"} if self.imex else None
                        ),
                        devices_dir=node.workdir / "containers" if self.imex else None,
                    )
                    for node in self.nodes
                )
            )
        )

    async def act_inject(self) -> list[Outcome]:
        k = self.knobs
        self.act("ordinary gpu-agent workloads on every node")
        outcomes = await self.new_workloads(keep_running=k.compute_domain)
        verdicts = []
        for i, outcome in enumerate(outcomes):
            clique = expected_clique(i, k.nodes) if k.compute_domain else None
            uuid = DOMAIN[1] if k.compute_domain else None
            if not k.compute_domain:
                self.verdicts.check(
                    not any(key.startswith("MOCK_FABRIC_") for key in outcome.env),
                    f"{outcome.node}: no fabric identity env without a ComputeDomain",
                )
            verdicts.append(self.judge(outcome, clique, uuid))
        say("")
        self.record("inject", outcomes, verdicts)
        return outcomes

    async def act_rebind(self, running: Sequence[Outcome]) -> None:
        assert self.service is not None
        name, uuid, clique = REBIND
        self.act(f"rebind: every node moves to clique {clique} of {name} ({uuid})")
        before = self.service.revision()
        write_atomically(self.document, rebind_yaml(self.names))
        await wait_until("the new topology revision", lambda: self.service.revision() > before, 10)  # type: ignore[union-attr]
        revision = self.service.revision()
        say(f"  topology service now at revision {revision}")
        started = time.monotonic()
        for node in self.nodes:
            await wait_until(
                f"{node.name}'s plugin to watch revision {revision}",
                lambda n=node: (n.metric("nvml_mock_nri_identity_revision") or -1) >= revision,
                10,
            )
        say(f"  every plugin holds revision {revision} ({time.monotonic() - started:.2f}s)")
        fresh = await self.new_workloads()
        verdicts = [self.judge(outcome, clique, uuid) for outcome in fresh]
        say("  new workloads:")
        self.record("rebind: new", fresh, verdicts)
        kept = await asyncio.gather(
            *(recheck(outcome, self.isolation, self.overlay) for outcome in running)
        )
        verdicts = []
        for i, outcome in enumerate(kept):
            verdicts.append(
                "KEPT"
                if self.verdicts.check(
                    outcome.clique == expected_clique(i, self.knobs.nodes)
                    and outcome.cluster_uuid == DOMAIN[1],
                    f"{outcome.node}: running {outcome.pod} keeps clique {outcome.clique} "
                    "it was given",
                )
                else "FAIL"
            )
        say("  running workloads (created before the rebind):")
        self.record("rebind: running", kept, verdicts)

    async def ctl(self, node: Node, *args: str) -> tuple[int, str]:
        """``nvml-mock-ctl`` on *node*, as its operator runs it (``kubectl exec`` into the
        staging pod on a real cluster)."""
        argv = [
            sys.executable,
            "-m",
            "nvml_mock_engine.ctl",
            "--live-file",
            str(self.live_of(node)),
        ]
        argv += ["--state-file", str(self.overlay / "config" / "state.nvmlmock"), *args]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        say(f"  $ nvml-mock-ctl {' '.join(args)}   (on {node.name})")
        for line in out.decode(errors="replace").splitlines():
            say(f"      {_clip(line, 100)}")
        return int(proc.returncode or 0), out.decode(errors="replace")

    def live_of(self, node: Node) -> Path:
        """The node's own live layer. The demo's nodes share one staged overlay, where a real
        cluster's each have their own: each node gets its own live file, and its act's
        workloads point the library at it (MOCK_NVML_LIVE, as a pod author could)."""
        return node.workdir / live.LIVE_FILE_NAME

    async def act_xid(self) -> None:
        victim = self.nodes[0]
        self.act(f"an Xid {XID_FALLEN_OFF_BUS} on {victim.name}'s GPU 0, while workloads run")
        board = live.read_board(self.overlay / "config" / "state.nvmlmock")
        for node in self.nodes:
            live.create(self.live_of(node), board)
        gpus = len(board)
        mount = names.OVERLAY_MOUNT_PATH
        runtime = f"{mount}/runtime"
        loader = loader_name(self.overlay / "runtime")
        script = self.work / "event-waiter.py"
        script.write_text(EVENT_WAITER)
        log = victim.workdir / "event-waiter.log"
        waiter = await create_and_run(
            victim.runtime,  # type: ignore[arg-type]
            victim.name,
            self.isolation,
            self.overlay,
            name="event-waiter",
            started=self.workloads,
            extra_env={"MOCK_NVML_LIVE": str(self.live_of(victim))},
            command=f'exec {runtime}/lib/{loader} --library-path "{runtime}/lib:{mount}/lib" '
            f"{runtime}/bin/python3 -I {script}",
            log=log,
        )
        await wait_until(
            "the event waiter to block in nvmlEventSetWait",
            lambda: "waiting" in log.read_text(errors="replace"),
            20,
        )
        say(f"  {victim.name}: {waiter.pod} (nvidia-ml-py) blocks in nvmlEventSetWait")
        rc, _ = await self.ctl(victim, "fail", "fallen-off-bus", "-i", "0")
        self.verdicts.check(rc == 0, f"{victim.name}: nvml-mock-ctl fail fallen-off-bus exits {rc}")
        want = f"xid {XID_FALLEN_OFF_BUS} gpu 0"
        with contextlib.suppress(TimeoutError):
            await wait_until(
                "the event waiter to wake", lambda: want in log.read_text(errors="replace"), 10
            )
        seen = log.read_text(errors="replace").strip().splitlines()
        self.verdicts.check(
            want in seen,
            f"{victim.name}: the running waiter woke with '{want}' (saw {seen[-1:]})",
        )
        after = await self.new_workloads(own_live_layer=True)
        verdicts = []
        for i, outcome in enumerate(after):
            if i == 0:
                lost = "GPU is lost" in outcome.output
                ok = self.verdicts.check(
                    lost and len(outcome.gpus) == gpus - 1,
                    f"{outcome.node}: a new workload's nvidia-smi -L shows GPU 0 lost and "
                    f"{len(outcome.gpus)} GPU(s)",
                )
                verdicts.append("LOST" if ok else "FAIL")
            else:
                ok = self.verdicts.check(
                    "GPU is lost" not in outcome.output and outcome.gpus != [],
                    f"{outcome.node}: its GPUs are untouched ({len(outcome.gpus)} listed)",
                )
                verdicts.append("PASS" if ok else "FAIL")
        say("  new workloads after the Xid:")
        self.record("xid 79", after, verdicts)
        rc, _ = await self.ctl(victim, "reset", "-i", "0")
        self.verdicts.check(rc == 0, f"{victim.name}: nvml-mock-ctl reset exits {rc}")
        cleared = await self.new_workloads(own_live_layer=True)
        verdicts = [
            "PASS"
            if self.verdicts.check(
                "GPU is lost" not in o.output and len(o.gpus) == gpus,
                f"{o.node}: after reset nvidia-smi -L lists {len(o.gpus)} GPU(s)",
            )
            else "FAIL"
            for o in cleared
        ]
        say("  new workloads after reset:")
        self.record("xid 79: reset", cleared, verdicts)

    async def node_smi_until(self, done: Callable[[list[str]], bool], *args: str) -> list[str]:
        """:meth:`node_smi` until *done* says its lines show what is awaited (at most 2 s):
        the plugin keeps the records just after it answers a life-cycle event, as on a node,
        where nvidia-smi run that soon after a start is as likely to miss it."""
        lines = await self.node_smi(*args)
        for _ in range(100):
            if done(lines):
                break
            await asyncio.sleep(0.02)
            lines = await self.node_smi(*args)
        return lines

    async def node_smi(self, *args: str) -> list[str]:
        """The node's own ``nvidia-smi`` (the work-alike over the staged overlay's library and
        live layer, as a node-level monitor runs it); its output lines."""
        env = {
            **os.environ,
            names.ENV_LD_LIBRARY_PATH: str(self.overlay / names.OVERLAY_LIB_DIR),
            names.ENV_MOCK_NVML_CONFIG: str(
                self.overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME
            ),
        }
        env.pop(names.ENV_MOCK_NVML_LIVE, None)
        env.pop(names.ENV_NVIDIA_VISIBLE_DEVICES, None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nvml_mock_smi",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        lines = out.decode(errors="replace").strip().splitlines()
        say(f"  $ nvidia-smi {' '.join(args)}   (on the node)")
        for line in lines or ["(no output)"]:
            say(f"      {_clip(line, 100)}")
        return lines

    async def act_allocation(self) -> None:
        node = self.nodes[0]
        assert node.runtime is not None
        board = live.read_board(self.overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME)
        gpu = min(2, len(board) - 1)
        uuid = board[gpu].uuid
        self.act(f"a workload allocated GPU {gpu} by NVIDIA_VISIBLE_DEVICES={gpu} on {node.name}")
        outcome = await create_and_run(
            node.runtime,
            node.name,
            self.isolation,
            self.overlay,
            name="trainer",
            keep_running=True,
            started=self.workloads,
            extra_env={names.ENV_NVIDIA_VISIBLE_DEVICES: str(gpu)},
        )
        v = self.verdicts
        ok = v.check(
            len(outcome.gpus) == 1 and uuid in outcome.gpus[0],
            f"{node.name}: the allocated workload's nvidia-smi -L lists exactly GPU {gpu} "
            f"({uuid}); saw {outcome.gpus}",
        )
        runtime = node.runtime
        stored = runtime.containers[outcome.container_id]
        pod = runtime.pods[stored.pod_sandbox_id]
        assert outcome.pid is not None
        await runtime.start_container(pod, outcome.container_id, outcome.pid)
        say(f"  {node.name}: the runtime starts it (host PID {outcome.pid}); the plugin records it")
        query = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader")
        memory = ("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
        # the plugin writes the record once PostStartContainer is answered, as on a node
        apps = await self.node_smi_until(bool, *query)
        used = await self.node_smi(*memory)
        ok &= v.check(
            len(apps) == 1 and apps[0].startswith(f"{outcome.pid}, ") and apps[0].endswith(uuid),
            f"{node.name}: node-level nvidia-smi shows the workload's process on GPU {gpu}: {apps}",
        )
        by_gpu = dict(line.split(", ", 1) for line in used)
        busy = int(by_gpu.get(str(gpu), "0"))
        idle = [int(m) for i, m in by_gpu.items() if i != str(gpu)]
        ok &= v.check(
            bool(idle) and busy > max(idle),
            f"{node.name}: GPU {gpu} shows {busy} MiB used, the others {idle}",
        )
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(outcome.pid, signal.SIGKILL)
        await runtime.stop_container(pod, stored)
        await runtime.remove_container(pod, outcome.container_id)
        say(f"  {node.name}: the workload stops and is removed")
        after = await self.node_smi_until(lambda lines: not lines, *query)
        used_after = dict(line.split(", ", 1) for line in await self.node_smi(*memory))
        ok &= v.check(
            after == [] and int(used_after.get(str(gpu), "0")) <= max(idle),
            f"{node.name}: afterwards no process and GPU {gpu} back to "
            f"{used_after.get(str(gpu))} MiB ({after})",
        )
        self.record("allocated", [outcome], ["PASS" if ok else "FAIL"])

    async def start_agent(self, node: Node) -> tuple[Process, str]:
        """The node's agent (the staging DaemonSet's second container on a real cluster)."""
        assert self.service is not None
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "nvml_mock_engine",
            "agent",
            "--topology-url",
            self.service.url,
            "--node",
            node.name,
            "--live-file",
            str(self.live_of(node)),
            "--state-file",
            str(self.overlay / "config" / "state.nvmlmock"),
            "--token-file",
            str(self.token),
            "--probe-addr",
            f"127.0.0.1:{port}",
            "--applied-file",
            str(node.workdir / "scenarios.applied.json"),
            "--report-spread",  # four nodes: no need to spread their reports
            "0.5",
        ]
        agent = await Process.start("agent", argv, node.workdir / "agent.log")
        self.agents.append(agent)
        return agent, f"http://127.0.0.1:{port}"

    def scenario_status(self) -> dict[str, str]:
        """Node -> state, from ``GET /v1/scenarios/{name}``."""
        assert self.service is not None
        status, body = http_get(f"{self.service.url}/v1/scenarios/{SCENARIO}")
        if status != 200:
            return {}
        return {row["node"]: row["state"] for row in json.loads(body)["nodes"]}

    async def act_scenario(self) -> None:
        assert self.service is not None
        self.act(
            f"a scenario: Xid {XID_FALLEN_OFF_BUS} (fallen-off-bus) on GPU 0 of 50% of the nodes"
        )
        state = self.overlay / "config" / "state.nvmlmock"
        board = live.read_board(state)
        gpus = len(board)
        for node in self.nodes:
            live.create(self.live_of(node), board)
        probes = [
            url for _, url in await asyncio.gather(*(self.start_agent(n) for n in self.nodes))
        ]
        for node, url in zip(self.nodes, probes, strict=True):
            await wait_until(
                f"{node.name}'s agent to be ready",
                lambda u=url: http_get(f"{u}/readyz")[0] == 200,
                20,
            )
        say(f"  an agent per node, each watching its scenarios at {self.service.url}")
        for line in SCENARIO_YAML.splitlines():
            say(f"    {line}")
        write_atomically(self.scenarios, SCENARIO_YAML)
        picked = sorted(
            parse_scenarios(SCENARIO_YAML).select(parse_topology(self.document.read_text()))[
                SCENARIO
            ]
        )
        say(f"  the seed picks {', '.join(picked)}")
        with contextlib.suppress(TimeoutError):
            await wait_until(
                "every picked node's agent to report it applied",
                lambda: (
                    sorted(n for n, s in self.scenario_status().items() if s == "applied") == picked
                ),
                15,
            )
        states = self.scenario_status()
        self.verdicts.check(
            sorted(n for n, s in states.items() if s == "applied") == picked
            and sorted(n for n, s in states.items() if s == "pending") == [],
            f"scenario status: applied on {sorted(n for n, s in states.items() if s == 'applied')}"
            f" (want {picked}), {states}",
        )
        rc, _ = await self.ctl_scenario("status", SCENARIO)
        self.verdicts.check(rc == 0, f"nvml-mock-ctl scenario status exits {rc}")
        after = await self.new_workloads(own_live_layer=True)
        verdicts = []
        for outcome in after:
            lost = "GPU is lost" in outcome.output
            if outcome.node in picked:
                ok = self.verdicts.check(
                    lost and len(outcome.gpus) == gpus - 1,
                    f"{outcome.node}: picked: nvidia-smi -L shows GPU 0 lost, "
                    f"{len(outcome.gpus)} GPU(s)",
                )
                verdicts.append("LOST" if ok else "FAIL")
            else:
                ok = self.verdicts.check(
                    not lost and len(outcome.gpus) == gpus,
                    f"{outcome.node}: not picked: {len(outcome.gpus)} GPU(s), none lost",
                )
                verdicts.append("PASS" if ok else "FAIL")
        say("  new workloads with the scenario applied:")
        self.record("scenario", after, verdicts)
        say("  removing the scenario from the document")
        write_atomically(self.scenarios, NO_SCENARIOS)
        with contextlib.suppress(TimeoutError):
            await wait_until(
                "the agents to clear it",
                lambda: all(
                    "gpu_lost" not in live_values(self.live_of(n), state, 0) for n in self.nodes
                ),
                15,
            )
        cleared = await self.new_workloads(own_live_layer=True)
        verdicts = [
            "PASS"
            if self.verdicts.check(
                "GPU is lost" not in o.output and len(o.gpus) == gpus,
                f"{o.node}: after the scenario is removed nvidia-smi -L lists {len(o.gpus)} GPU(s)",
            )
            else "FAIL"
            for o in cleared
        ]
        say("  new workloads after it was removed:")
        self.record("scenario: removed", cleared, verdicts)
        await asyncio.gather(*(agent.stop() for agent in self.agents))

    async def ctl_scenario(self, *args: str) -> tuple[int, str]:
        """``nvml-mock-ctl scenario ...`` against the topology service."""
        assert self.service is not None
        argv = [sys.executable, "-m", "nvml_mock_engine.ctl", "scenario", *args]
        argv += ["--url", self.service.url]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        say(f"  $ nvml-mock-ctl scenario {' '.join(args)} --url {self.service.url}")
        for line in out.decode(errors="replace").splitlines():
            say(f"      {_clip(line, 110)}")
        return int(proc.returncode or 0), out.decode(errors="replace")

    async def act_imex(self) -> None:
        self.act("an IMEX domain of two nodes (nvidia-imex work-alike)")
        self.imex_rows = await run_imex_act(
            work=self.work,
            overlay=self.overlay,
            node_names=self.names,
            topology_url=self.service.url if self.service is not None else None,
            check=self.verdicts.check,
            say=say,
        )

    async def act_fault(self) -> None:
        self.act("faults")
        cd = self.knobs.compute_domain
        clique, uuid = (REBIND[2], REBIND[1]) if cd else (None, None)
        if self.service is not None:
            say("  stopping the topology service")
            await self.service.stop()
            await asyncio.sleep(0.5)
            fresh = await self.new_workloads()
            verdicts = [self.judge(outcome, clique, uuid) for outcome in fresh]
            say("  new workloads with the topology service down (cached identity):")
            self.record("topology down", fresh, verdicts)
            for node in self.nodes:
                status, body = node.readyz()
                self.verdicts.check(
                    status == 200,
                    f"{node.name}: /readyz still answers {status} ({_clip(body)})",
                )
        victim = self.nodes[-1]
        say(f"\n  stopping the NRI plugin of {victim.name} (as if it crashed or was deleted)")
        assert victim.plugin is not None and victim.runtime is not None
        await victim.plugin.stop(signal.SIGKILL)
        outcome = await create_and_run(victim.runtime, victim.name, self.isolation, self.overlay)
        self.verdicts.check(
            not outcome.injected and not outcome.gpus and outcome.exit_code == 10,
            f"{victim.name}: fail-open: the new workload was created without the overlay and "
            f"sees no GPUs (gpu-agent exit {outcome.exit_code})",
        )
        self.record("plugin stopped", [outcome], ["FAIL-OPEN" if not outcome.gpus else "FAIL"])
        status, body = victim.readyz()
        self.verdicts.check(
            status != 200,
            f"{victim.name}: its /readyz probe fails ({status or 'no answer'}: {body[:60]}), so "
            "kubelet marks the plugin pod NotReady and the DaemonSet shows it",
        )
        say(
            "  -> injection stops silently for the runtime (containerd creates the container "
            "anyway); the plugin's readiness probe is the signal to alert on."
        )


def live_values(path: Path, state: Path, gpu: int) -> dict[str, int]:
    """The live values of one GPU of a node's live layer, bound to the board *state* (empty
    when it cannot be read)."""
    try:
        with live.LiveLayer.open(path, state=state, writable=False) as layer:
            return layer.values(gpu)
    except live.LiveLayerError:
        return {}


def parse_knobs(argv: Sequence[str] | None) -> Knobs:
    env = os.environ
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=env.get("GPU_PROFILE", "gb200"))
    parser.add_argument("--gpu-count", default=env.get("GPU_COUNT", ""))
    parser.add_argument("--nodes", default=env.get("NODE_COUNT", "4"))
    parser.add_argument(
        "--compute-domain",
        choices=("true", "false", "auto"),
        default=env.get("WITH_COMPUTE_DOMAIN", "auto"),
    )
    parser.add_argument("--workdir", default=env.get("DEMO_WORKDIR", str(REPO / ".demo")))
    parser.add_argument(
        "--no-mount-namespaces",
        action="store_true",
        default=env.get("DEMO_MOUNT_NAMESPACES", "true") == "false",
        help="use the overlay at its host path instead of mounting it (env DEMO_MOUNT_NAMESPACES)",
    )
    args = parser.parse_args(argv)
    try:
        count = int(args.gpu_count) if str(args.gpu_count).strip() else None
        nodes = int(args.nodes)
    except ValueError as exc:
        raise SystemExit(f"make demo: GPU_COUNT and NODE_COUNT must be integers ({exc})") from None
    if count is not None and not 1 <= count <= 64:
        raise SystemExit(f"make demo: GPU_COUNT={count} is outside 1..64")
    if not 1 <= nodes <= 16:
        raise SystemExit(f"make demo: NODE_COUNT={nodes} is outside 1..16")
    try:
        fabric = load_profile(args.profile).fabric is not None
    except NvmlEngineError as exc:
        raise SystemExit(f"make demo: GPU_PROFILE={args.profile!r}: {exc}") from None
    cd = args.compute_domain
    compute_domain = fabric if cd == "auto" else cd == "true"
    if compute_domain and not fabric:
        raise SystemExit(
            f"make demo: profile {args.profile} is not fabric-attached (its GPUs answer fabric "
            "queries NOT_SUPPORTED); use WITH_COMPUTE_DOMAIN=false"
        )
    return Knobs(
        args.profile,
        count,
        compute_domain,
        nodes,
        Path(args.workdir),
        mount_namespaces=not args.no_mount_namespaces,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        knobs = parse_knobs(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 3
        raise
    try:
        return asyncio.run(Demo(knobs).run())
    except KeyboardInterrupt:
        say("\ninterrupted: every process the demo started has been stopped")
        return 130
    except (RuntimeError, TimeoutError) as exc:
        say(f"\nDEMO FAILED: {exc or type(exc).__name__}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
