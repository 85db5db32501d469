"""Collections on an interval, served from memory: a scrape never waits on NVML.

Like dcgm-exporter, the exporter reads the GPUs on its own clock (``--collect-interval``)
and a scrape is answered with the last collection's text, so Prometheus' scrape timeout
never races an NVML call. A GPU that answers ``GPU_IS_LOST`` has its series dropped from
that collection on (the event-made Xid and health families stay, with its last Xid), as
dcgm-exporter leaves out the blank values of a GPU that fell off the bus.

A stuck NVML call (a driver that does not come back) must not freeze the metrics either: a
watchdog sees a GPU whose read has run past ``--nvml-timeout``, gives that collection up,
publishes the others without the stuck GPU, and starts a fresh collecting thread that skips
it. When the stuck call returns, its thread notices it was replaced and ends, and the GPU is
read again. ``/health`` turns 503 when no collection finished for three intervals.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pynvml

from nvml_mock_exporter.counters import CountersFile
from nvml_mock_exporter.health import health
from nvml_mock_exporter.pods import PodRecords
from nvml_mock_exporter.readings import (
    Entity,
    Gpu,
    GpuLost,
    Reader,
    discover,
    driver_version,
    entities_of,
)
from nvml_mock_exporter.render import HEALTH, Row, render
from nvml_mock_exporter.restage import StateFile
from nvml_mock_exporter.xid import XidWatcher

__all__ = ["Collector", "Labels"]

logger = logging.getLogger(__name__)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_FAIL = 20
"""DCGM's health result ``DCGM_HEALTH_RESULT_FAIL``: what ``/health`` names a GPU for."""


@dataclass(frozen=True, slots=True)
class Labels:
    """The node-wide parts of every series."""

    host_key: str | None
    host: str
    driver: str
    nvml_version: str
    window_ms: int


class Collector:
    """Reads every GPU on an interval and keeps the rendered text of the last collection."""

    def __init__(
        self,
        *,
        gpus: Sequence[Gpu],
        counters: CountersFile,
        xids: XidWatcher,
        pods: PodRecords | None,
        labels: Labels,
        interval: float,
        nvml_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        state: StateFile | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.counters = counters
        self.reader = Reader(frozenset(c.name for c in counters.counters))
        self.xids = xids
        self.pods = pods
        self.labels = labels
        self.interval = interval
        self.nvml_timeout = nvml_timeout
        self._clock = clock
        self.state = state
        self._nvml_problem: str | None = None
        self.restages = 0
        self._lock = threading.Lock()
        self._text = b""
        self._finished: float | None = None
        self._generation = 0
        self._busy: tuple[int, int, float] | None = None  # generation, GPU index, since
        self._stuck: set[int] = set()
        self._lost: set[int] = set()
        self._failing: dict[int, str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.collections = 0

    # --- what a scrape reads ---------------------------------------------------------

    @property
    def text(self) -> bytes:
        with self._lock:
            return self._text

    def age(self) -> float | None:
        """Seconds since the last collection finished; None before the first."""
        with self._lock:
            return None if self._finished is None else self._clock() - self._finished

    def healthy(self) -> tuple[bool, str]:
        """Whether collections are coming in; the reason when not."""
        problem = self._nvml_problem
        if problem is not None:
            return False, problem
        age = self.age()
        if age is None:
            return False, "no collection has finished yet"
        limit = 3 * self.interval + self.nvml_timeout
        if age > limit:
            return False, f"the last collection finished {age:.1f}s ago (limit {limit:.1f}s)"
        notes = []
        if self._stuck:
            stuck = ", ".join(str(g) for g in sorted(self._stuck))
            notes.append(f"NVML calls stuck on GPU {stuck}, left out")
        with self._lock:
            failing = dict(self._failing)
        notes += [f"GPU {gpu} fails health: {why}" for gpu, why in sorted(failing.items())]
        return True, "; ".join(["ok", *notes])

    @property
    def stuck(self) -> frozenset[int]:
        return frozenset(self._stuck)

    # --- one collection ----------------------------------------------------------------

    def collect(self, generation: int | None = None) -> bytes | None:
        """Read every GPU once and render; None when this collection was given up."""
        if self.counters.poll():
            self.reader.select(c.name for c in self.counters.counters)
        counters = self.counters.counters
        whole, mig = self.pods.read() if self.pods is not None else ({}, {})
        counts = self.xids.all_counts()
        want_health = any(c.name == HEALTH for c in counters)
        rows: list[Row] = []
        failing: dict[int, str] = {}
        for gpu in self.gpus:
            if gpu.index in self._stuck:
                continue
            with self._lock:
                if generation is not None and generation != self._generation:
                    return None
                mine = self._generation if generation is None else generation
                self._busy = (mine, gpu.index, self._clock())
            replaced = False
            try:
                entities = self._read_gpu(gpu)
            finally:
                with self._lock:
                    replaced = generation is not None and generation != self._generation
                    if replaced:
                        self._stuck.discard(gpu.index)  # it came back: read it next time
                    else:
                        self._busy = None
            if replaced:
                return None
            xid = self.xids.last(gpu.index) or 0
            xid_counts = counts.get(gpu.index, {})
            for entity, values, lost in entities:
                pods = (
                    mig.get((gpu.uuid, entity.gi_id), [])
                    if entity.gi_id is not None
                    else whole.get(gpu.uuid, [])
                )
                found = self._health(values, xid_counts, lost) if want_health else {}
                if found.get("ALL", (0, ""))[0] >= _FAIL:
                    failing[gpu.index] = ", ".join(
                        f"{watch} {code}"
                        for watch, (level, code) in found.items()
                        if level >= _FAIL and watch != "ALL"
                    )
                rows.append(
                    Row(
                        entity=entity,
                        values=values,
                        lost=lost,
                        xid=xid,
                        xid_counts=xid_counts,
                        health=found,
                        pods=pods,
                    )
                )
        with self._lock:
            if generation is None or generation == self._generation:
                self._failing = failing
        return render(
            counters,
            rows,
            host_key=self.labels.host_key,
            host=self.labels.host,
            driver=self.labels.driver,
            nvml_version=self.labels.nvml_version,
            window_ms=self.labels.window_ms,
        )

    @staticmethod
    def _health(
        values: dict[str, float], xids: dict[int, int], lost: bool
    ) -> dict[str, tuple[int, str]]:
        found = health(values, xids)
        if lost:
            found["PCIE"] = (20, "DCGM_FR_FALLEN_OFF_BUS")
            found["ALL"] = (20, "DCGM_FR_FALLEN_OFF_BUS")
        return found

    def _read_gpu(self, gpu: Gpu) -> list[tuple[Entity, dict[str, float], bool]]:
        try:
            entities = entities_of(gpu)
            found = [(entity, self.reader.read(entity), False) for entity in entities]
        except GpuLost:
            if gpu.index not in self._lost:
                logger.warning("GPU %d (%s) is lost: its series are dropped", gpu.index, gpu.uuid)
                self._lost.add(gpu.index)
                self.reader.forget(gpu.index)
            return [(Entity(gpu), {}, True)]
        except pynvml.NVMLError as exc:
            logger.warning(
                "GPU %d could not be read (%s); left out of this collection", gpu.index, exc
            )
            return []
        if gpu.index in self._lost:
            logger.info("GPU %d (%s) answers again", gpu.index, gpu.uuid)
            self._lost.discard(gpu.index)
        return found

    def _publish(self, text: bytes) -> None:
        with self._lock:
            self._text = text
            self._finished = self._clock()
            self.collections += 1

    # --- a re-staged node ---------------------------------------------------------------------

    def _restage(self) -> None:
        """Read the GPUs again from the node's new state: NVML shut down and initialised
        again, the GPUs found again, a new Xid watch on them. Until that succeeds nothing is
        published and ``/health`` says why (retried at every interval)."""
        assert self.state is not None
        signature = self.state.settled(self._stop.wait)
        if signature is None:
            return
        logger.info("the node's GPU state changed (%s): reading the GPUs again", self.state.path)
        self.xids.stop()
        self.reader.reset()
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        try:
            pynvml.nvmlInit()
            gpus = discover()
            driver = driver_version()
            try:
                nvml = _text(pynvml.nvmlSystemGetNVMLVersion())
            except pynvml.NVMLError:
                nvml = ""
        except pynvml.NVMLError as exc:
            problem = f"NVML cannot read the re-staged node ({exc}); retrying"
            if problem != self._nvml_problem:
                logger.error("%s", problem)
            with self._lock:
                self._nvml_problem = problem
            return
        self.state.accept(signature)
        xids = XidWatcher(gpus, self.xids.window_s)
        xids.start()
        with self._lock:
            self.gpus = gpus
            self.xids = xids
            self.labels = dataclasses.replace(self.labels, driver=driver, nvml_version=nvml)
            self._stuck.clear()
            self._lost.clear()
            self._failing = {}
            self._nvml_problem = None
            self.restages += 1
        logger.info(
            "serving %d GPUs of the re-staged node",
            len(gpus),
            extra={"gpus": len(gpus), "uuids": [g.uuid for g in gpus]},
        )

    # --- the loop and its watchdog -------------------------------------------------------

    def start(self) -> None:
        """Collect once now (so the first scrape has data), then on the interval."""
        self._spawn()
        threading.Thread(target=self._watch, name="collect-watchdog", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _spawn(self) -> None:
        with self._lock:
            self._generation += 1
            generation = self._generation
        thread = threading.Thread(
            target=self._loop, args=(generation,), name=f"collect-{generation}", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _loop(self, generation: int) -> None:
        while not self._stop.is_set():
            started = self._clock()
            try:
                if self.state is not None and self.state.changed():
                    self._restage()
                text = None if self._nvml_problem is not None else self.collect(generation)
            except Exception:
                logger.exception("a collection failed; the last one keeps serving")
                text = None
            with self._lock:
                if generation != self._generation:
                    return
            if text is not None:
                self._publish(text)
            self._stop.wait(max(0.0, self.interval - (self._clock() - started)))

    def _watch(self) -> None:
        tick = min(0.1, self.nvml_timeout / 4)
        while not self._stop.wait(tick):
            with self._lock:
                busy = self._busy
                current = self._generation
            if busy is None or busy[0] != current:
                continue
            _, gpu, since = busy
            if self._clock() - since <= self.nvml_timeout:
                continue
            logger.error(
                "an NVML call on GPU %d has not returned for %.1fs; its series are left out "
                "until it does",
                gpu,
                self._clock() - since,
            )
            with self._lock:
                self._stuck.add(gpu)
                self._busy = None
            if len([t for t in self._threads if t.is_alive()]) > len(self.gpus):
                logger.error("every GPU's collector is stuck; not starting another")
                continue
            self._spawn()
