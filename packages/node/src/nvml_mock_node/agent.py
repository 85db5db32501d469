"""The node agent (``nvml-mock-engine agent``): apply the node's scenarios in its live layer.

It watches ``GET /v1/nodes/{node}/scenarios`` on the topology service (a long poll with
the revision it has, so a change arrives within a second), and on its own clock applies
each scenario when a run starts and clears it when the run's ``duration`` is over. It
reports every scenario's state (``pending``, ``applied``, ``cleared``, ``failed`` with the
reason, ``excluded`` when the node's labels do not match) back to the service.

What it applies goes through the same recipes and checks as ``nvml-mock-ctl``: ``fault``
is a recipe of :mod:`nvml_mock_engine.faults`, ``util`` a pattern of ``nvml-mock-ctl
util``, ``set`` live keys validated against ``keys.toml``, ``xid`` an event. A value the
engine refuses fails the scenario on this node with that reason; nothing is written.

Nothing is left behind: before it writes a run, the agent records it (the values per GPU
and when the run ends) in ``scenarios.applied.json`` beside the live file (in a staged
overlay, the state root ``.nvml-mock/``, which re-staging keeps), with the last
scenarios the service gave it. After a restart it reads that file first, so a run whose
end has passed is cleared at once, even when the service cannot be reached. When the
service is down the agent keeps its last scenarios, keeps their schedule, and says so in
``/readyz`` (503, with since when and which revision it keeps).

Clearing a run resets the keys it set; where another run still applied on the same GPU
set one of them, that run's value is written again, so overlapping scenarios end cleanly.
Events (Xids) cannot be unsent.

On the same clock the agent keeps the driver root's MIG capability files
(``proc/driver/nvidia/capabilities/gpu<N>/mig/``) true to the live MIG layout
(:class:`~nvml_mock_node.driver_surfaces.MigFollower`), whoever changed it. That is needed
on every staged node, with or without a topology service, so without ``--topology-url`` the
agent runs for it alone: no scenario is watched, applied, cleared or reported, and
``/readyz`` answers 200 with ``"scenarios": "off"``.
"""

from __future__ import annotations

import http.server
import json
import logging
import math
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from nvml_mock_engine import faults
from nvml_mock_engine._files import write_atomic
from nvml_mock_engine.errors import (
    AnswerTooLargeError,
    KernelLogError,
    LiveLayerError,
    LiveValueError,
    NvmlEngineError,
)
from nvml_mock_engine.faults import Event, GpuView
from nvml_mock_engine.gpu_select import select_gpus
from nvml_mock_engine.http_answers import (
    ERROR_MAX_BYTES,
    failure_reason,
    read_bounded,
)
from nvml_mock_engine.kernel_log import Announcer, open_sink
from nvml_mock_engine.settings import AgentSettings
from nvml_mock_live import LiveLayer, vocabulary
from nvml_mock_live.scenario_api import NodeReport, NodeScenario, NodeScenarios, ScenarioReport
from nvml_mock_live.scenarios import Scenario, gpu_rank

from nvml_mock_node.driver_surfaces import MigFollower

__all__ = ["Agent", "AppliedRun", "run_agent", "run_window"]

logger = logging.getLogger(__name__)

_TICK: Final = 0.1
"""Seconds between schedule checks: a run ends within this of its duration."""
_RETRY: Final = 2.0
"""Seconds before asking an unreachable service again."""
_LAYER_RETRY_MS: Final = 5000
"""A live layer that could not be opened (not staged yet) is tried again after this."""
_APPLIED_FORMAT: Final = 1


def run_window(
    entry: NodeScenario, scenario: Scenario, now_ms: int
) -> tuple[int, int, int | None] | None:
    """The run active at ``now_ms``: (run number, its start, its end or None), or None."""
    start = entry.start_ms
    if now_ms < start:
        return None
    duration = scenario.duration_ms
    run = 0
    if scenario.repeat is not None:
        run = (now_ms - start) // scenario.repeat.every_ms
        if scenario.repeat.times is not None and run >= scenario.repeat.times:
            return None
        start += run * scenario.repeat.every_ms
    end = None if duration is None else start + duration
    if end is not None and now_ms >= end:
        return None
    return run, start, end


@dataclass
class AppliedRun:
    """One run written to the live layer, as recorded before the write."""

    name: str
    revision: int
    run: int
    values: dict[str, dict[str, int]]
    """Live values per GPU index (as text, JSON's keys)."""
    uuids: list[str]
    applied_ms: int
    ends_ms: int | None
    latency_ms: int = 0


@dataclass
class _Outcome:
    revision: int
    state: str
    run: int = 0
    reason: str | None = None
    gpus: list[str] = field(default_factory=list)
    applied_ms: int | None = None
    cleared_ms: int | None = None
    latency_ms: int | None = None
    retry_ms: int | None = None
    """A failure worth retrying (the live layer was not there): when."""


class _Metrics:
    def __init__(self) -> None:
        self.applies = 0
        self.clears = 0
        self.failures = 0
        self.reports = 0
        self.report_failures = 0
        self.latency_sum = 0.0
        self.latency_count = 0


class Agent:
    """The agent's state and its reconcile step; :meth:`run` drives it until stopped."""

    def __init__(self, settings: AgentSettings, clock: Any = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.served: NodeScenarios | None = None
        self.applied: dict[str, AppliedRun] = {}
        self.outcomes: dict[str, _Outcome] = {}
        self.connected = False
        self.contact_ms: int | None = None
        """When the service last answered."""
        self.down_since_ms: int | None = None
        self.last_error: str | None = None
        self.metrics = _Metrics()
        self._mig_files = MigFollower(settings.live_path)
        """The driver root's MIG capability files follow the live MIG layout on every tick:
        the agent is the one long-running process of every staged node."""
        self._reported: str | None = None
        self._write_off_logged = False
        self._report_after = 0.0
        self._report_due: float | None = None
        """When a changed state goes out (monotonic): a random delay under the spread."""
        self._sent_at = time.monotonic()
        self._jitter = random.Random()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.last_tick = time.monotonic()
        self.announcer = Announcer(open_sink(settings.kernel_log))
        """Xids the scenarios send, also written where the operator asked (default: off)."""
        self._load()

    # -- the applied file ---------------------------------------------------------------

    def _load(self) -> None:
        path = self.settings.applied_path
        earlier = self.settings.earlier_applied_path
        try:
            if not path.exists() and earlier is not None and earlier.exists():
                path = earlier  # kept by an earlier release in the generation's config/
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.error("cannot read %s; starting without it: %s", path, exc)
            return
        try:
            if data.get("format") != _APPLIED_FORMAT:
                raise ValueError(f"format {data.get('format')!r}")
            if data.get("served") is not None:
                self.served = NodeScenarios.model_validate(data["served"])
            for item in data.get("applied", []):
                run = AppliedRun(**item)
                self.applied[run.name] = run
                # Reported as applied again (a restarted service learns it from the heartbeat).
                self.outcomes[run.name] = _Outcome(
                    run.revision,
                    "applied",
                    run=run.run,
                    gpus=list(run.uuids),
                    applied_ms=run.applied_ms,
                    latency_ms=run.latency_ms,
                )
        except (TypeError, ValueError) as exc:
            logger.error("%s is not an applied file this agent reads: %s", path, exc)
            return
        logger.info(
            "read what was applied before the restart",
            extra={"applied": len(self.applied), "path": str(path)},
        )

    def _save(self) -> None:
        data = {
            "format": _APPLIED_FORMAT,
            "node": self.settings.node,
            "served": self.served.model_dump(mode="json", by_alias=True) if self.served else None,
            "applied": [asdict(run) for run in self.applied.values()],
        }
        write_atomic(self.settings.applied_path, json.dumps(data, indent=1).encode(), 0o600)

    # -- reconcile ------------------------------------------------------------------------

    def accept(self, served: NodeScenarios) -> None:
        """Take a new answer from the service (the watch thread calls this)."""
        with self._lock:
            served = self._keep_starts(served)
            changed = self.served != served
            if not self.connected and self.down_since_ms is not None:
                # Back after the service was unreachable: it may have restarted and lost
                # every status, so what this node has goes out again.
                self._reported = None
            self.served = served
            self.connected = True
            self.contact_ms = self._now()
            self.down_since_ms = None
            self.last_error = None
            if changed:
                self._save()
        self._wake.set()

    def _keep_starts(self, served: NodeScenarios) -> NodeScenarios:
        """A scenario at a revision this agent already had keeps the start it had.

        A restarted service resolves ``start: now`` afresh for the same definition
        (same revision); taking the new start would apply a finished run again, or stretch
        a running one past its ``duration``.
        """
        known = (
            {(e.name, e.revision): e.start_ms for e in self.served.scenarios}
            if (self.served)
            else {}
        )
        entries = []
        kept = False
        for entry in served.scenarios:
            start = known.get((entry.name, entry.revision), entry.start_ms)
            if start != entry.start_ms:
                entries.append(entry.model_copy(update={"start_ms": start}))
                kept = True
            else:
                entries.append(entry)
        return served.model_copy(update={"scenarios": tuple(entries)}) if kept else served

    def lost(self, error: str) -> None:
        """The service could not be reached; keep the last scenarios."""
        with self._lock:
            if self.connected or self.down_since_ms is None:
                self.down_since_ms = self._now()
                logger.warning(
                    "topology service unreachable; keeping the last scenarios: %s", error
                )
            self.connected = False
            self.last_error = error

    def _now(self) -> int:
        return int(self.clock() * 1000)

    def step(self) -> bool:
        """Apply and clear what the clock says; returns True when something changed."""
        with self._lock:
            return self._step(self._now())

    def _step(self, now: int) -> bool:
        entries = {e.name: e for e in self.served.scenarios} if self.served else {}
        changed = False
        parsed: dict[str, Scenario] = {}
        for name, entry in entries.items():
            try:
                parsed[name] = entry.parsed()
            except ValueError as exc:
                self._set(name, _Outcome(entry.revision, "failed", reason=f"invalid: {exc}"))
        # End what is over (or gone, or changed) first: a new version may reuse its keys.
        for name, done in list(self.applied.items()):
            current = entries.get(name)
            definition = parsed.get(name)
            window = run_window(current, definition, now) if current and definition else None
            if current and current.revision == done.revision and window and window[0] == done.run:
                continue
            self._clear(done)
            changed = True
            ended = self.outcomes.get(name)
            if current is not None and current.revision == done.revision and ended is not None:
                ended.state, ended.cleared_ms = "cleared", now
        for name, entry in entries.items():
            scenario = parsed.get(name)
            if scenario is None or name in self.applied:
                continue
            labels = scenario.selector.labels
            have = self.settings.node_labels or {}
            if any(have.get(k) != v for k, v in labels.items()):
                changed |= self._set(
                    name,
                    _Outcome(entry.revision, "excluded", reason="the node's labels do not match"),
                )
                continue
            window = run_window(entry, scenario, now)
            outcome = self.outcomes.get(name)
            if window is None:
                if outcome is None or outcome.revision != entry.revision:
                    changed |= self._set(name, _Outcome(entry.revision, "pending"))
                continue
            number, run_start, run_end = window
            if (
                outcome is not None
                and outcome.revision == entry.revision
                and outcome.run == number
                and outcome.state in ("failed", "cleared")
                and (outcome.retry_ms is None or now < outcome.retry_ms)
            ):
                continue
            changed = True
            self._apply(entry, scenario, run=number, run_start=run_start, run_end=run_end, now=now)
        for name in list(self.outcomes):
            if name not in entries:
                del self.outcomes[name]
        return changed

    def _set(self, name: str, outcome: _Outcome) -> bool:
        before = self.outcomes.get(name)
        if before is not None and (before.revision, before.state, before.reason) == (
            outcome.revision,
            outcome.state,
            outcome.reason,
        ):
            return False
        self.outcomes[name] = outcome
        return True

    def _open(self) -> LiveLayer:
        return LiveLayer.open(
            self.settings.live_path, state=self.settings.state_path, writable=True
        )

    def _apply(
        self,
        entry: NodeScenario,
        scenario: Scenario,
        *,
        run: int,
        run_start: int,
        run_end: int | None,
        now: int,
    ) -> None:
        try:
            with self._open() as layer:
                gpus = _pick_gpus(scenario, self.settings.node, layer)
                plans: dict[int, tuple[dict[str, int], list[Event]]] = {}
                for index in gpus:
                    values, events = _plan(
                        scenario, GpuView(layer.board[index], layer.values(index))
                    )
                    plans[index] = (layer.validate(index, values), events)
                uuids = [layer.board[i].uuid for i in gpus]
                record = AppliedRun(
                    name=scenario.name,
                    revision=entry.revision,
                    run=run,
                    values={str(i): plan[0] for i, plan in plans.items()},
                    uuids=uuids,
                    applied_ms=now,
                    ends_ms=run_end,
                    latency_ms=max(0, now - run_start),
                )
                self.applied[scenario.name] = record
                self._save()  # recorded before written: a crash in between leaves no orphan
                for index, (checked, planned) in plans.items():
                    if checked:
                        layer.set(index, checked)
                    for event in planned:
                        layer.event(index, event.event_type, event.data)
                    self.announcer.events(layer, index, planned)
        except LiveValueError as exc:
            self.applied.pop(scenario.name, None)
            self._fail(entry, run, str(exc), retry=False)
            return
        except (LiveLayerError, OSError, NvmlEngineError) as exc:
            self.applied.pop(scenario.name, None)
            self._fail(entry, run, str(exc), retry=True)
            return
        self.metrics.applies += 1
        self.metrics.latency_sum += record.latency_ms / 1000
        self.metrics.latency_count += 1
        self.outcomes[scenario.name] = _Outcome(
            entry.revision,
            "applied",
            run=run,
            gpus=uuids,
            applied_ms=now,
            latency_ms=record.latency_ms,
        )
        logger.info(
            "applied scenario %s (run %d) on %d GPU(s)",
            scenario.name,
            run,
            len(uuids),
            extra={"revision": entry.revision, "until_ms": run_end},
        )

    def _fail(self, entry: NodeScenario, run: int, reason: str, *, retry: bool) -> None:
        self.metrics.failures += 1
        retry_ms = self._now() + _LAYER_RETRY_MS if retry else None
        before = self.outcomes.get(entry.name)
        if before is None or (before.state, before.reason) != ("failed", reason):
            logger.error("scenario %s failed on this node: %s", entry.name, reason)
        self.outcomes[entry.name] = _Outcome(
            entry.revision, "failed", run=run, reason=reason, retry_ms=retry_ms
        )

    def _clear(self, run: AppliedRun) -> None:
        del self.applied[run.name]
        try:
            with self._open() as layer:
                for gpu, values in run.values.items():
                    index = int(gpu)
                    if index >= layer.gpu_count:
                        continue
                    layer.clear(index, list(values))
                    # Keys another run still holds on this GPU get that run's value back.
                    for other in self.applied.values():
                        kept = {k: v for k, v in other.values.get(gpu, {}).items() if k in values}
                        if kept:
                            layer.set(index, kept)
        except (LiveLayerError, OSError) as exc:
            # A live layer that is gone or replaced (a re-stage) holds none of these values.
            logger.warning("could not clear scenario %s: %s", run.name, exc)
        self._save()
        self.metrics.clears += 1
        logger.info("cleared scenario %s (run %d)", run.name, run.run)

    # -- reports --------------------------------------------------------------------------

    def report_body(self) -> NodeReport:
        with self._lock:
            entries = [
                ScenarioReport(
                    name=name,
                    revision=o.revision,
                    state=o.state,  # type: ignore[arg-type]
                    reason=o.reason,
                    gpus=tuple(o.gpus),
                    run=o.run,
                    appliedMs=o.applied_ms,
                    clearedMs=o.cleared_ms,
                    latencyMs=o.latency_ms,
                )
                for name, o in sorted(self.outcomes.items())
            ]
            revision = self.served.revision if self.served else 0
        return NodeReport(revision=revision, scenarios=tuple(entries))

    def report(self) -> None:
        """Send the states when they changed since the last report that was taken.

        A change goes out after a random delay under ``report_spread`` (what changes
        meanwhile goes in the same report); an unchanged state again after ``heartbeat``;
        a report the service refused as over its budget (429) after its ``Retry-After``
        plus a jitter under a second.
        """
        body = self.report_body().model_dump_json(by_alias=True, exclude_none=True)
        now = time.monotonic()
        if not self.connected or now < self._report_after:
            return
        if body == self._reported:
            beat = self.settings.heartbeat
            if not beat or now - self._sent_at < beat:
                return
        elif self._report_due is None:
            self._report_due = now + self._jitter.uniform(0, self.settings.report_spread)
        if self._report_due is not None and now < self._report_due:
            return
        self._report_due = None
        self._sent_at = now
        self._report_after = now + _RETRY  # until it is taken: not every tick
        request = urllib.request.Request(
            f"{self.settings.topology_url}/v1/nodes/{self.settings.node}/scenarios/status",
            data=body.encode(),
            method="POST",
            headers={"content-type": "application/json", **self._auth()},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                read_bounded(response, ERROR_MAX_BYTES)
        except urllib.error.HTTPError as exc:
            self.metrics.report_failures += 1
            if exc.code == 429:
                wait = _retry_after(exc.headers.get("retry-after"))
                self._report_after = time.monotonic() + wait + self._jitter.random()
                logger.debug("report deferred %.0f s: the service is over its budget", wait)
                exc.close()
                return
            detail = _detail(exc)
            if exc.code == 403 and "write API is off" in detail:
                if not self._write_off_logged:
                    logger.warning("the service takes no reports: %s", detail)
                    self._write_off_logged = True
                self._reported = body  # not worth resending until something changes
                return
            logger.error("report refused (%d): %s", exc.code, detail)
            return
        except (urllib.error.URLError, OSError, AnswerTooLargeError) as exc:
            self.metrics.report_failures += 1
            logger.debug("report not sent: %s", failure_reason(exc, 10))
            return
        self.metrics.reports += 1
        self._reported = body
        self._report_after = 0.0

    def _auth(self) -> dict[str, str]:
        if self.settings.token_file is None:
            return {}
        try:
            token = self.settings.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            logger.error("cannot read the token file: %s", exc)
            return {}
        return {"authorization": f"Bearer {token}"}

    # -- running --------------------------------------------------------------------------

    def watch_once(self, wait: float) -> None:
        """One request to the service (a long poll with ``wait``); updates the state."""
        revision = self.served.revision if self.served is not None and self.connected else None
        query = f"?revision={revision}&wait={wait:g}" if revision is not None else ""
        url = f"{self.settings.topology_url}/v1/nodes/{self.settings.node}/scenarios{query}"
        timeout = wait + 15
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                served = NodeScenarios.model_validate_json(read_bounded(response))
        except urllib.error.HTTPError as exc:
            self.lost(f"HTTP {exc.code}: {_detail(exc)}")
            raise
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.lost(failure_reason(exc, timeout))
            raise
        self.accept(served)

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.watch_once(self.settings.max_wait)
            except Exception:
                self._stop.wait(_RETRY)

    @property
    def scenarios_on(self) -> bool:
        """Whether there is a topology service to take scenarios from."""
        return bool(self.settings.topology_url)

    def run(self) -> None:
        """Watch, apply, clear and report until :meth:`stop`; without a topology service,
        only keep the surfaces true."""
        if self.scenarios_on:
            watcher = threading.Thread(target=self._watch_loop, name="scenario-watch", daemon=True)
            watcher.start()
        while not self._stop.is_set():
            self.last_tick = time.monotonic()
            try:
                if self.scenarios_on:
                    self.step()
                    self.report()
                self._mig_files.poll()
            except Exception:
                logger.exception("unexpected error in the agent's step; going on")
            self._wake.wait(_TICK)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # -- probes ---------------------------------------------------------------------------

    def readiness(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            body: dict[str, Any] = {
                "node": self.settings.node,
                "revision": self.served.revision if self.served else None,
                "scenarios": len(self.served.scenarios) if self.served else 0,
                "applied": sorted(self.applied),
            }
            if not self.scenarios_on:
                return 200, {"status": "ready", **body, "scenarios": "off"}
            if self.connected:
                return 200, {"status": "ready", **body}
            since = self.down_since_ms
            kept = "no scenarios yet" if self.served is None else f"revision {self.served.revision}"
            detail = (
                f"the topology service {self.settings.topology_url} is unreachable"
                f"{'' if since is None else f' since {since} ms'}: {self.last_error}; "
                f"keeping the last scenarios ({kept})"
            )
            return 503, {"status": "service-unreachable", "detail": detail, **body}

    def metrics_text(self) -> str:
        m = self.metrics
        with self._lock:
            active = len(self.applied)
            served = len(self.served.scenarios) if self.served else 0
            failed = sum(1 for o in self.outcomes.values() if o.state == "failed")
        rows = [
            ("gauge", "scenarios", "Scenarios the service gave this node", served),
            ("gauge", "scenarios_active", "Scenarios applied in the live layer now", active),
            ("gauge", "scenarios_failed", "Scenarios that failed on this node", failed),
            ("gauge", "service_up", "1 while the topology service answers", int(self.connected)),
            ("counter", "applies_total", "Scenario runs written to the live layer", m.applies),
            ("counter", "clears_total", "Scenario runs cleared", m.clears),
            ("counter", "failures_total", "Scenario runs that could not be applied", m.failures),
            ("counter", "reports_total", "Reports taken by the service", m.reports),
            ("counter", "report_failures_total", "Reports not taken", m.report_failures),
        ]
        lines = []
        for kind, name, text, value in rows:
            full = f"nvml_mock_agent_{name}"
            lines += [f"# HELP {full} {text}", f"# TYPE {full} {kind}", f"{full} {value}"]
        full = "nvml_mock_agent_apply_latency_seconds"
        lines += [
            f"# HELP {full} From a run's start to its write in the live layer",
            f"# TYPE {full} summary",
            f"{full}_sum {m.latency_sum}",
            f"{full}_count {m.latency_count}",
        ]
        return "\n".join(lines) + "\n"


def _pick_gpus(scenario: Scenario, node: str, layer: LiveLayer) -> list[int]:
    board = layer.board
    selection = scenario.gpus
    if selection.all:
        return [gpu.index for gpu in board]
    if selection.count is not None:
        if selection.count > len(board):
            raise LiveValueError(
                "gpus.count", selection.count, f"is more than this node's {len(board)} GPUs"
            )
        seed = scenario.selector.seed
        ranked = sorted(board, key=lambda g: gpu_rank(seed, scenario.name, node, g.index))
        return sorted(g.index for g in ranked[: selection.count])
    spec = ",".join([*(str(i) for i in selection.indices), *selection.uuids])
    return select_gpus(layer.board, spec)


def _plan(scenario: Scenario, gpu: GpuView) -> tuple[dict[str, object], list[Event]]:
    """The live values and events of ``scenario`` on one GPU: the fault's plan, then its
    ``set`` keys, then its utilization, all in the live vocabulary the topology service
    validated the document with (a run's values are what its end clears)."""
    apply = scenario.apply
    values: dict[str, object] = {}
    events: list[Event] = []
    if apply.fault is not None:
        plan = faults.plan(apply.fault, gpu)
        values.update(plan.values)
        events.extend(plan.events)
    for key, raw in apply.set.items():
        values[key] = vocabulary.check_live_value(key, raw)
    utilization = apply.utilization(seed=scenario.selector.seed)
    if utilization is not None:
        util_values, _ = vocabulary.utilization_values(
            utilization, now_ms=time.time_ns() // 1_000_000
        )
        values.update(util_values)
    if apply.xid is not None:
        events.append(Event(faults.EVENT_XID, apply.xid))
    return values, events


def _retry_after(value: str | None) -> float:
    """``Retry-After`` in seconds (a number; anything else: the usual retry)."""
    try:
        seconds = float(value) if value is not None else _RETRY
    except ValueError:
        return _RETRY
    return min(max(seconds, 0.0), 3600.0) if math.isfinite(seconds) else _RETRY


def _detail(exc: urllib.error.HTTPError) -> str:
    """The ``detail`` of an error answer (the service's sentence); closes the answer."""
    try:
        body = json.loads(read_bounded(exc, ERROR_MAX_BYTES) or b"{}")
    except (ValueError, OSError):
        return str(exc.reason)
    finally:
        exc.close()
    return str(body.get("detail", exc.reason)) if isinstance(body, Mapping) else str(exc.reason)


class _Probes(http.server.BaseHTTPRequestHandler):
    agent: Agent

    def do_GET(self) -> None:
        if self.path == "/healthz":
            alive = time.monotonic() - self.agent.last_tick < 30
            status, body = (200, "ok\n") if alive else (503, "the agent's loop is stuck\n")
            self._send(status, body.encode(), "text/plain")
        elif self.path == "/readyz":
            status, data = self.agent.readiness()
            self._send(status, json.dumps(data).encode(), "application/json")
        elif self.path == "/metrics":
            self._send(200, self.agent.metrics_text().encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("probe: " + format, *args)


def serve_probes(agent: Agent, address: tuple[str, int]) -> http.server.ThreadingHTTPServer:
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` in a thread; returns the server."""
    handler = type("Probes", (_Probes,), {"agent": agent})
    server = http.server.ThreadingHTTPServer(address, handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-probes", daemon=True).start()
    return server


def run_agent(settings: AgentSettings) -> int:
    """``nvml-mock-engine agent``: run until SIGTERM/SIGINT; returns the exit code."""
    import signal

    try:
        agent = Agent(settings)
    except KernelLogError as exc:
        logger.error("cannot start: %s", exc)
        return 3
    server = serve_probes(agent, settings.probe_addr) if settings.probe_addr else None
    if server is not None:
        logger.info("probes on %s:%d", *server.server_address[:2])

    def stop(signum: int, frame: object) -> None:
        agent.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    where = {"live": str(settings.live_path), "applied_file": str(settings.applied_path)}
    if settings.topology_url:
        logger.info(
            "watching scenarios of node %s at %s",
            settings.node,
            settings.topology_url,
            extra=where,
        )
    else:
        logger.info(
            "keeping the surfaces of %s true to its live layer (no topology service: no scenarios)",
            settings.live_path.parent.parent,
            extra=where,
        )
    try:
        agent.run()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0
