"""The scenario document: faults and load declared once for a cluster, applied by every node.

It sits beside the topology document, in the same style (versioned, validated whole,
every problem reported at once with its place) and is read by the topology service,
which serves each node the scenarios that select it::

    version: 1
    scenarios:
      - name: xid-79-clique-1
        selector: {cliques: [1], percent: 10, seed: 7}
        gpus: {count: 1}
        apply: {xid: 79, fault: fallen-off-bus}
        start: now
        duration: 10m

A scenario has a **selector** (node names or globs, domains, cliques, node labels and a
deterministic share of the nodes), the **GPUs** of each selected node (indices, UUIDs,
``all`` or ``count: N``), what to **apply** (a fault recipe, an Xid, a utilization
pattern and/or live keys, by the names ``nvml-mock-ctl`` takes) and **when** (``start``
now or at an RFC 3339 time, an optional ``duration`` after which it is cleared, and an
optional ``repeat``).

What a scenario applies is checked here with the live vocabulary itself
(:mod:`nvml_mock_live.vocabulary`, the parsers ``nvml-mock-ctl`` and the node agent use): a
fault recipe that is declared, a utilization the agent applies, durations in the one
grammar, live keys that exist with values inside their declared bounds. What only a node can
judge (a GPU index past its board, a value past its board's room, a recipe the GPU cannot
take) the agent reports as ``failed``.

Selection is deterministic: the same document, topology and seed pick the same nodes
and GPUs every time, on every replica. A share (``percent``) is taken by ranking the
candidate nodes the service knows (those of the topology document and those named
literally in ``nodes``) by a hash of seed, scenario and node name, and picking the first
``ceil(percent * n / 100)``; a node the service does not know (matched by a glob only) is
picked when its own hash falls under the share. Labels are matched by the node agent,
which is told its node's labels; the service cannot see them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from nvml_mock_protocol.topology import (
    DOCUMENT_MAX_BYTES,
    DOCUMENT_MAX_ITEMS,
    CliqueId,
    TopologyDocument,
    TopologyError,
    _check_version,
    _data_shape_problem,
    _describe,
    _load_json,
    _load_yaml,
    _problem_report,
    _problems,
    _read_bounded,
    _shown,
)
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from nvml_mock_live import vocabulary
from nvml_mock_live.errors import LiveError, LiveValueError
from nvml_mock_live.keys import LIVE_GPU_KEYS

__all__ = [
    "SCENARIOS_VERSION",
    "SCENARIO_NAME_MAX_LENGTH",
    "Apply",
    "GpuSelection",
    "NameMatcher",
    "Repeat",
    "Scenario",
    "ScenarioDocument",
    "ScenarioError",
    "Selector",
    "gpu_rank",
    "node_rank",
    "parse_duration_ms",
    "parse_scenarios",
    "read_scenarios_file",
    "validate_scenarios_data",
]

SCENARIOS_VERSION: Literal[1] = 1
"""The only scenario document version this build reads."""
SCENARIO_NAME_MAX_LENGTH = 63
"""Scenario names are DNS-1123 labels: they appear in URLs, metrics labels and log lines."""
XID_MAX = 2**32 - 1
"""NVML reports an Xid as the event's unsigned 32-bit data."""

_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_GPU_UUID_RE = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]{1,90}")
_NODE_PATTERN_RE = re.compile(r"[-a-z0-9.*?\[\]!]{1,253}")
_NODE_PATTERNS_RE = re.compile(r"[-a-z0-9.*?\[\]!]{1,253}(?:\n[-a-z0-9.*?\[\]!]{1,253})*")
"""Every one of a list of node patterns joined by newlines (which no pattern holds)."""


def parse_duration_ms(text: str | int) -> int:
    """Milliseconds of a duration, in the live vocabulary's one grammar (``500ms``, ``1.5s``,
    ``90s``, ``1m30s``, ``2h`` or a number of seconds), at most 366 days. Raises
    ``ValueError`` saying what is accepted."""
    try:
        return vocabulary.parse_duration_ms(text)
    except LiveValueError as exc:
        raise ValueError(f"{_shown(text)} {exc.message}") from None


def _check_name(value: str) -> str:
    if len(value) > SCENARIO_NAME_MAX_LENGTH or not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"scenario name {_shown(value)} must be lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {SCENARIO_NAME_MAX_LENGTH} "
            "characters (a DNS-1123 label)"
        )
    return value


def _check_node_pattern(value: str) -> str:
    if not _NODE_PATTERN_RE.fullmatch(value):
        raise ValueError(
            f"node pattern {_shown(value)} must be a node name or a glob of lowercase "
            "letters, digits, '-', '.', and '*', '?', '[...]'"
        )
    return value


def _check_fault(value: str) -> str:
    if value not in vocabulary.FAULTS:
        raise ValueError(
            f"fault {_shown(value)} is not a fault recipe; recipes: {', '.join(vocabulary.FAULTS)}"
        )
    return value


def _check_key(value: str) -> str:
    if value not in LIVE_GPU_KEYS:
        raise ValueError(
            f"live key {_shown(value)} is not a live key (those of nvml-mock-ctl set, e.g. "
            "temperature_c)"
        )
    if value in vocabulary.TRIGGER_KEYS:
        raise ValueError(f"live key {_shown(value)} is a trigger's; a scenario applies at start")
    return value


def _check_duration(value: str | int) -> str | int:
    parse_duration_ms(value)
    return value


def _start_text(value: Any) -> Any:
    """YAML reads an unquoted RFC 3339 time as a datetime; keep it as the text it was."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(
                f"start {value.isoformat()} has no time zone; add Z or an offset (RFC 3339)"
            )
        return value.isoformat()
    if isinstance(value, date):
        raise ValueError(f"start {value.isoformat()} is a date; give a time too (RFC 3339)")
    return value


def _check_start(value: str) -> str:
    if value == "now":
        return value
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"start {_shown(value)} is neither 'now' nor an RFC 3339 time "
            "(e.g. 2026-12-01T14:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"start {_shown(value)} has no time zone; add Z or an offset (RFC 3339)")
    return value


ScenarioName = Annotated[StrictStr, AfterValidator(_check_name)]
NodePattern = Annotated[StrictStr, AfterValidator(_check_node_pattern)]
FaultName = Annotated[StrictStr, AfterValidator(_check_fault)]
KeyName = Annotated[StrictStr, AfterValidator(_check_key)]
Duration = Annotated[StrictStr | StrictInt, AfterValidator(_check_duration)]
Start = Annotated[StrictStr, BeforeValidator(_start_text), AfterValidator(_check_start)]
LabelText = Annotated[StrictStr, Field(min_length=1, max_length=317)]
LabelValue = Annotated[StrictStr, Field(max_length=63)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Selector(_Model):
    """Which nodes a scenario is for; every field given must match (an empty one matches all)."""

    nodes: tuple[NodePattern, ...] = ()
    """Node names or globs (``worker-*``); a node matching any of them."""
    domains: tuple[StrictStr, ...] = ()
    """ComputeDomain names of the topology document; a node placed in any of them."""
    cliques: tuple[CliqueId, ...] = ()
    """Clique ids (in any domain, or in ``domains`` when given)."""
    labels: dict[LabelText, LabelValue] = Field(default_factory=dict)
    """Node labels that must all be present with these values (checked by the node agent)."""
    percent: Annotated[float, Field(gt=0, le=100, strict=False)] = 100
    """The share of the matching nodes to pick, deterministically with ``seed``."""
    seed: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] = 0
    """Seed of the pick (nodes and ``gpus.count``): the same seed picks the same ones."""

    @field_validator("nodes", mode="wrap")
    @classmethod
    def _names_at_once(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A list of valid names is checked with one expression over all of them (a
        100,000-name selector, one by one, was a fifth of a reload); anything else goes
        through the per-name checks, which say which name is wrong and where."""
        if type(value) is list and value:
            try:
                joined = "\n".join(value)
            except TypeError:  # not all strings: the per-name checks say which
                return handler(value)
            if _NODE_PATTERNS_RE.fullmatch(joined) is not None:
                return tuple(value)
        return handler(value)

    @field_validator("percent", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"percent must be a number in (0, 100], got {_describe(value)}")
        return value


class GpuSelection(_Model):
    """Which GPUs of a selected node: ``all``, given indices and UUIDs, or ``count`` of them."""

    all: StrictBool = False
    indices: tuple[Annotated[StrictInt, Field(ge=0, le=63)], ...] = ()
    uuids: tuple[StrictStr, ...] = ()
    count: Annotated[StrictInt, Field(ge=1, le=64)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_document(cls, value: Any) -> Any:
        """``all``, a list of indices and UUIDs, or ``{count: N}``, as the document has it."""
        if value == "all":
            return {"all": True}
        if isinstance(value, list):
            indices, uuids = [], []
            for item in value:
                if isinstance(item, int) and not isinstance(item, bool):
                    indices.append(item)
                elif isinstance(item, str) and item.isdigit():
                    indices.append(int(item))
                elif isinstance(item, str) and _GPU_UUID_RE.fullmatch(item):
                    uuids.append(item)
                else:
                    raise ValueError(
                        f"GPU {_shown(item)} is neither an index nor a GPU UUID (GPU-...)"
                    )
            if not value:
                raise ValueError("the GPU list is empty; give indices, UUIDs, all or {count: N}")
            return {"indices": indices, "uuids": uuids}
        if isinstance(value, Mapping):
            if set(value) - {"count", "all", "indices", "uuids"}:
                unknown = sorted(str(k) for k in set(value) - {"count", "all", "indices", "uuids"})
                raise ValueError(f"gpus has unknown key(s) {', '.join(unknown)}; use count")
            return value
        raise ValueError(
            "gpus must be all, a list of indices and UUIDs, or {count: N}, "
            f"got {_describe(value)}"
        )

    @model_validator(mode="after")
    def _one_way(self) -> GpuSelection:
        ways = sum((self.all, bool(self.indices or self.uuids), self.count is not None))
        if ways != 1:
            raise ValueError("gpus must be exactly one of all, a list, or {count: N}")
        return self

    def to_wire(self) -> Any:
        """The document's own spelling (``all``, a list, or ``{count: N}``)."""
        if self.all:
            return "all"
        if self.count is not None:
            return {"count": self.count}
        return [*self.indices, *self.uuids]


LiveValue = StrictInt | StrictBool | StrictStr


class Apply(_Model):
    """What a scenario does to each selected GPU; at least one of these, applied in this order.

    ``fault`` first (its recipe's values and events), then ``set`` (live keys, which win
    over the fault's), then ``util``, then the ``xid`` event.
    """

    fault: FaultName | None = None
    """A fault recipe of ``nvml-mock-ctl fail`` (``fallen-off-bus``, ``thermal``...)."""
    xid: Annotated[StrictInt, Field(ge=1, le=XID_MAX)] | None = None
    """An Xid to send (``nvmlEventTypeXidCriticalError``), as ``nvml-mock-ctl xid``."""
    util: StrictStr | None = None
    """A utilization percentage or pattern, as ``nvml-mock-ctl util`` takes it
    (``busy``, ``steady 90``, ``sine 80``); power and temperature follow it."""
    period: Duration | None = None
    """The ``util`` pattern's period (burst, sine)."""
    set: dict[KeyName, LiveValue] = Field(default_factory=dict)
    """Live keys and values, as ``nvml-mock-ctl set KEY=VALUE`` takes them."""

    @field_validator("util", mode="before")
    @classmethod
    def _util_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _something(self) -> Apply:
        if self.fault is None and self.xid is None and self.util is None and not self.set:
            raise ValueError("apply names nothing; give fault, xid, util and/or set")
        if self.period is not None and self.util is None:
            raise ValueError("period is the util pattern's; give util too")
        if self.util is not None:
            try:
                vocabulary.parse_utilization_words(self.util, period=self.period)
            except LiveValueError as exc:
                raise ValueError(f"util {_shown(self.util)}: {exc}") from None
        for key, value in self.set.items():
            try:
                vocabulary.check_live_value(key, value)
            except LiveValueError as exc:
                raise ValueError(f"set: {exc}") from None
        return self

    def utilization(self, seed: int = 0) -> vocabulary.Utilization | None:
        """The ``util`` (with its ``period``) as the live layer stores it, the scenario's
        *seed* seeding the pattern; None without one."""
        if self.util is None:
            return None
        return vocabulary.parse_utilization_words(self.util, period=self.period, seed=seed)


class Repeat(_Model):
    """Run the scenario again every ``every``, ``times`` times in all (forever when absent)."""

    every: Duration
    times: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None

    @property
    def every_ms(self) -> int:
        return parse_duration_ms(self.every)


class Scenario(_Model):
    """One named scenario: which nodes and GPUs, what to apply, and when."""

    name: ScenarioName
    selector: Selector = Field(default_factory=Selector)
    gpus: GpuSelection = Field(default_factory=lambda: GpuSelection(all=True))
    apply: Apply
    start: Start = "now"
    """``now`` (when the service first serves this version of the scenario) or an RFC 3339
    time with a zone."""
    duration: Duration | None = None
    """Cleared this long after each start; absent: until the scenario is removed."""
    repeat: Repeat | None = None

    @model_validator(mode="after")
    def _schedule(self) -> Scenario:
        if self.repeat is not None:
            if self.duration is None:
                raise ValueError("repeat needs a duration (each run must end before the next)")
            if self.repeat.every_ms <= parse_duration_ms(self.duration):
                raise ValueError(
                    f"repeat.every {_shown(self.repeat.every)} must be longer than the "
                    f"duration {_shown(self.duration)}"
                )
        return self

    @property
    def duration_ms(self) -> int | None:
        return None if self.duration is None else parse_duration_ms(self.duration)

    def start_ms(self, now_ms: int) -> int:
        """The first start in ms since the epoch; ``now`` resolves to ``now_ms``."""
        if self.start == "now":
            return now_ms
        moment = datetime.fromisoformat(self.start.replace("Z", "+00:00").replace("z", "+00:00"))
        return int(moment.timestamp() * 1000)

    @cached_property
    def names(self) -> NameMatcher:
        """The selector's names and globs, indexed once (see :class:`NameMatcher`)."""
        return NameMatcher(self.selector.nodes)

    def matches_name(self, node: str) -> bool:
        """Whether ``node`` matches the selector's names and globs (all nodes when none)."""
        return self.names.matches(node)

    def to_data(self) -> dict[str, Any]:
        """The scenario as JSON-ready data, spelled as in the document."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["gpus"] = self.gpus.to_wire()
        return data

    def to_node_data(self, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """The scenario as a picked node is told it: without the node names, domains and
        cliques, which the service has already resolved.

        A selector may list 100,000 names; each picked node's answer carrying all of
        them would make the answers of every node together grow with the square of it.
        What the node still decides (its labels, the seed of ``gpus: {count: N}``) stays.
        *data*, when given, is :meth:`to_data`'s answer, made once for both (it is not
        changed).
        """
        data = dict(self.to_data() if data is None else data)
        if isinstance(data.get("selector"), dict):
            data["selector"] = dict(data["selector"])
        selector = data.get("selector")
        if isinstance(selector, dict):
            for resolved in ("nodes", "domains", "cliques", "percent"):
                selector.pop(resolved, None)
        return data


class NameMatcher:
    """A selector's node names and globs, indexed so that matching costs no more than
    the node name is long, however many names the selector lists.

    Literal names go in a set. A glob is indexed by its literal prefix (what comes before
    its first ``*``, ``?`` or ``[``), so a node is tried only against the globs whose
    prefix it starts with: one dictionary lookup per prefix length of the node's name.
    Globs of the same prefix are compiled together into one expression. Matching a
    100,000-name selector against 100,000 nodes is then a set lookup per node, where
    trying every pattern on every node was 10^10 ``fnmatch`` calls.
    """

    __slots__ = ("_globs", "_lengths", "literals", "patterns")

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        joined = "\n".join(self.patterns)
        # Through a dict: a set made from a sequence sizes its table for four times the
        # names, from a dict for twice (2 MiB instead of 1 for 20,000 names, which 40
        # scenarios of a scenario document multiply).
        if "*" in joined or "?" in joined or "[" in joined:
            globs = [p for p in self.patterns if "*" in p or "?" in p or "[" in p]
            self.literals = frozenset(dict.fromkeys(self.patterns)).difference(globs)
        else:  # names only (one scan of their text in C, not a test per name)
            globs = []
            self.literals = frozenset(dict.fromkeys(self.patterns))
        by_prefix: dict[str, list[str]] = {}
        for pattern in dict.fromkeys(globs):
            prefix = pattern[: min(pattern.find(c) % (len(pattern) + 1) for c in "*?[")]
            by_prefix.setdefault(prefix, []).append(fnmatch.translate(pattern))
        self._globs = {
            prefix: re.compile("|".join(f"(?:{t})" for t in translated))
            for prefix, translated in by_prefix.items()
        }
        self._lengths = sorted({len(prefix) for prefix in self._globs})

    @property
    def everything(self) -> bool:
        """No names at all: every node matches."""
        return not self.patterns

    @property
    def has_globs(self) -> bool:
        return bool(self._globs)

    def matches(self, node: str) -> bool:
        if not self.patterns or node in self.literals:
            return True
        for length in self._lengths:
            if length > len(node):
                break
            compiled = self._globs.get(node[:length])
            if compiled is not None and compiled.match(node):
                return True
        return False

    def select(self, nodes: Iterable[str]) -> list[str]:
        """The given nodes that match, in their order."""
        if not self.patterns:
            return list(nodes)
        if not self._globs:
            literals = self.literals
            return [node for node in nodes if node in literals]
        return [node for node in nodes if self.matches(node)]


def node_rank(seed: int, scenario: str, node: str) -> int:
    """The deterministic rank of a node for a scenario's share (a 64-bit hash)."""
    digest = hashlib.sha256(f"{seed}\0{scenario}\0{node}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def gpu_rank(seed: int, scenario: str, node: str, gpu: int) -> int:
    """The deterministic rank of one GPU of a node for ``gpus: {count: N}``."""
    digest = hashlib.sha256(f"{seed}\0{scenario}\0{node}\0{gpu}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _share(percent: float, total: int) -> int:
    return min(total, math.ceil(percent * total / 100 - 1e-9))


class ScenarioDocument(_Model):
    """The whole scenario document; names must be unique."""

    version: Literal[1]
    scenarios: tuple[Scenario, ...] = ()

    @field_validator("version", mode="before")
    @classmethod
    def _known_version(cls, version: Any) -> Any:
        return _check_version("scenario", version, SCENARIOS_VERSION)

    @model_validator(mode="after")
    def _unique_names(self) -> ScenarioDocument:
        seen: dict[str, int] = {}
        problems = []
        for position, scenario in enumerate(self.scenarios):
            earlier = seen.setdefault(scenario.name, position)
            if earlier != position:
                problems.append(
                    f"scenario name {scenario.name!r} is used twice "
                    f"(scenarios[{earlier}] and scenarios[{position}])"
                )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def by_name(self) -> dict[str, Scenario]:
        return {scenario.name: scenario for scenario in self.scenarios}

    def select(
        self, topology: TopologyDocument, extra_nodes: Iterable[str] = ()
    ) -> dict[str, frozenset[str]]:
        """Each scenario's picked nodes among those the service knows.

        Known nodes are the topology's and ``extra_nodes`` (the literal names of every
        selector, and any other node asked about). Deterministic for a given input.
        """
        known: set[str] | None = None  # made only for a selector that needs it
        picked: dict[str, frozenset[str]] = {}
        for scenario in self.scenarios:
            names = scenario.names
            placed = bool(scenario.selector.domains or scenario.selector.cliques)
            candidates: Iterable[str]
            if not (names.has_globs or names.everything or placed):
                candidates = names.literals  # every literal name is known: no walk at all
            else:
                if known is None:
                    known = set(topology.node_index()) | set(extra_nodes)
                    for each in self.scenarios:
                        known.update(each.names.literals)
                if names.has_globs or names.everything:
                    pool: Iterable[str] = known
                else:  # literal names only: look each up, never walk every known node
                    pool = names.literals & known
                candidates = [
                    n for n in names.select(pool) if _placement_matches(scenario, topology, n)
                ]
            if scenario.selector.percent >= 100:
                picked[scenario.name] = frozenset(candidates)
            else:
                picked[scenario.name] = frozenset(self._take_share(scenario, list(candidates)))
        return picked

    @staticmethod
    def _take_share(scenario: Scenario, candidates: Sequence[str]) -> list[str]:
        percent = scenario.selector.percent
        if percent >= 100:
            return list(candidates)
        seed = scenario.selector.seed
        ranked = sorted(candidates, key=lambda node: (node_rank(seed, scenario.name, node), node))
        return ranked[: _share(percent, len(ranked))]

    def picks_unknown(self, scenario: Scenario, node: str) -> bool:
        """Whether a node the service does not know is picked (by its own hash)."""
        selector = scenario.selector
        if selector.domains or selector.cliques or not scenario.matches_name(node):
            return False
        if selector.percent >= 100:
            return True
        threshold = int(selector.percent / 100 * 2**64)
        return node_rank(selector.seed, scenario.name, node) < threshold


def _is_glob(pattern: str) -> bool:
    return any(char in pattern for char in "*?[")


def _placement_matches(scenario: Scenario, topology: TopologyDocument, node: str) -> bool:
    """Whether a node whose name already matched is placed where the selector asks."""
    selector = scenario.selector
    if not (selector.domains or selector.cliques):
        return True
    placement = topology.placement(node)
    if placement is None:
        return False
    if selector.domains and placement.domain not in selector.domains:
        return False
    return not selector.cliques or placement.clique_id in selector.cliques


class ScenarioError(LiveError, ValueError):
    """A scenario document that cannot be used, with every problem found in it.

    Bounded as :class:`~nvml_mock_protocol.topology.TopologyError` is: at most
    :data:`~nvml_mock_protocol.topology.REPORT_MAX_PROBLEMS` problems and about
    :data:`~nvml_mock_protocol.topology.REPORT_MAX_BYTES` bytes are written.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.source = source
        message, _ = _problem_report("scenario", self.problems, source, len(self.problems))
        super().__init__(message)


def validate_scenarios_data(data: Any, source: str | None = None) -> ScenarioDocument:
    """Validate parsed data as a scenario document; raises :class:`ScenarioError`."""
    if not isinstance(data, Mapping):
        raise ScenarioError(
            [f"document: expected a mapping with 'version' and 'scenarios', got {_describe(data)}"],
            source,
        )
    try:
        return ScenarioDocument.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc.errors(include_url=False), data)
        raise ScenarioError([_named(p, data) for p in problems], source) from None


def _named(problem: str, data: Mapping[Any, Any]) -> str:
    """``scenarios[2].apply`` reads ``scenarios[2] 'xid-79'.apply``: names are what people edit."""
    match = re.match(r"scenarios\[(\d+)\]", problem)
    scenarios = data.get("scenarios")
    if match is None or not isinstance(scenarios, list):
        return problem
    position = int(match.group(1))
    entry = scenarios[position] if position < len(scenarios) else None
    name = entry.get("name") if isinstance(entry, Mapping) else None
    if not isinstance(name, str):
        return problem
    return f"{match.group(0)} {_shown(name)}{problem[match.end() :]}"


def parse_scenarios(
    text: str | bytes,
    source: str | None = None,
    *,
    max_bytes: int = DOCUMENT_MAX_BYTES,
    max_items: int = DOCUMENT_MAX_ITEMS,
) -> ScenarioDocument:
    """Parse and validate a scenario document from YAML or JSON text, bounded as the
    topology document is (size, values with aliases expanded, depth, duplicate keys)."""
    if len(text) > max_bytes:
        raise ScenarioError([f"document is larger than the limit of {max_bytes} bytes"], source)
    try:
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ScenarioError([f"document is not UTF-8: {exc}"], source) from None
        stripped = text.lstrip()
        if stripped.startswith("{"):
            data = _load_json(stripped, source)
            problem = _data_shape_problem(data, max_items)
        else:
            data, problem = _load_yaml(text, source, max_items)
    except TopologyError as exc:
        raise ScenarioError(exc.problems, source) from None
    if problem is not None:
        raise ScenarioError([problem], source)
    if data is None:
        raise ScenarioError(["document is empty; expected 'version: 1' and 'scenarios'"], source)
    return validate_scenarios_data(data, source)


def read_scenarios_file(
    path: str | Path,
    *,
    max_bytes: int = DOCUMENT_MAX_BYTES,
    max_items: int = DOCUMENT_MAX_ITEMS,
) -> ScenarioDocument:
    """Read, parse and validate the scenario document at ``path``.

    Read as the topology file is (regular files only, bounded, without blocking): raises
    :class:`ScenarioError` for what is in the file and ``OSError`` when it cannot be opened.
    """
    try:
        raw = _read_bounded(Path(path), max_bytes, "scenario file")
    except TopologyError as exc:
        raise ScenarioError(exc.problems, str(path)) from None
    return parse_scenarios(raw, str(path), max_bytes=max_bytes, max_items=max_items)
