"""HTTP schemas of the scenario API: what a node is told to apply, and what it reports back.

``GET /v1/nodes/{node}/scenarios`` answers :class:`NodeScenarios` with the same watch
contract as the identity (``revision`` + ``wait`` query parameters; the answer comes
when the node's list changes or the wait ends; its revision in the
``X-Scenarios-Revision`` header and the ETag). Every scenario in it is resolved for the
node: its first start in milliseconds since the epoch (``now`` is fixed when the service
first serves that version of the scenario, so agents that restart do not start it again).

Agents ``POST /v1/nodes/{node}/scenarios/status`` a :class:`NodeReport`, the state of every
scenario they were given; ``GET /v1/scenarios`` and ``GET /v1/scenarios/{name}`` show the
states per node (:data:`STATES`). Field names on the wire are camelCase.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from nvml_mock_protocol.topology import NodeName
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from nvml_mock_live.scenarios import Scenario

__all__ = [
    "SCENARIOS_REVISION_HEADER",
    "STATES",
    "NodeReport",
    "NodeScenario",
    "NodeScenarios",
    "NodeStatus",
    "ScenarioDetail",
    "ScenarioList",
    "ScenarioReport",
    "ScenarioSummary",
    "State",
]

SCENARIOS_REVISION_HEADER: Final = "X-Scenarios-Revision"
"""Response header carrying the node's scenario revision."""
STATES: Final = ("pending", "applied", "cleared", "failed", "excluded")
"""``pending``: not applied yet (before its start, or no report); ``applied``: in the live
layer now; ``cleared``: its run ended and was cleared; ``failed``: the agent could not apply
it (``reason`` says why); ``excluded``: served, but the node's labels do not match."""
State = Literal["pending", "applied", "cleared", "failed", "excluded"]
Millis = Annotated[StrictInt, Field(ge=0)]


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class NodeScenario(_Wire):
    """One scenario as a node gets it: the scenario, its version and its resolved start."""

    name: StrictStr
    revision: Millis
    """The scenario's version: a hash of its definition, the same in every service process
    (a restart of the service is not a new version)."""
    start_ms: Millis = Field(alias="startMs")
    """Its first start, ms since the epoch."""
    scenario: dict[str, Any]
    """The scenario as in the document (``Scenario.to_data``)."""

    def parsed(self) -> Scenario:
        """The scenario, validated again (the agent trusts nothing it reads off the wire)."""
        return Scenario.model_validate(self.scenario)


class NodeScenarios(_Wire):
    """``GET /v1/nodes/{node}/scenarios``: every scenario selecting the node."""

    node: NodeName
    revision: Millis
    """The revision at which this node's list last changed."""
    scenarios: tuple[NodeScenario, ...] = ()


class ScenarioReport(_Wire):
    """What an agent did with one scenario."""

    name: StrictStr
    revision: Millis
    """The scenario revision it acted on."""
    state: State
    reason: StrictStr | None = None
    gpus: tuple[StrictStr, ...] = ()
    """UUIDs of the GPUs it applied to."""
    run: Annotated[StrictInt, Field(ge=0)] = 0
    """Which run of a repeating scenario (0 is the first)."""
    applied_ms: Millis | None = Field(default=None, alias="appliedMs")
    cleared_ms: Millis | None = Field(default=None, alias="clearedMs")
    latency_ms: Annotated[StrictInt, Field(ge=0)] | None = Field(default=None, alias="latencyMs")
    """From the run's start to the write in the live layer."""


class NodeReport(_Wire):
    """``POST /v1/nodes/{node}/scenarios/status``: the agent's view of its scenarios."""

    revision: Millis
    """The node's scenario revision the agent had."""
    scenarios: tuple[ScenarioReport, ...] = Field(default=(), max_length=1000)


class NodeStatus(_Wire):
    """One node's state for one scenario in ``GET /v1/scenarios/{name}``."""

    node: StrictStr
    state: State
    reason: StrictStr | None = None
    gpus: tuple[StrictStr, ...] = ()
    run: int = 0
    applied_ms: int | None = Field(default=None, alias="appliedMs")
    cleared_ms: int | None = Field(default=None, alias="clearedMs")
    reported_ms: int | None = Field(default=None, alias="reportedMs")


class ScenarioSummary(_Wire):
    """One scenario in ``GET /v1/scenarios``: its counts of nodes per state."""

    name: StrictStr
    revision: Millis
    start_ms: Millis = Field(alias="startMs")
    nodes: int
    """Nodes the service picked (known nodes; unknown nodes matched by a glob add to this
    once they ask)."""
    states: dict[str, int]


class ScenarioList(_Wire):
    """``GET /v1/scenarios``."""

    revision: Millis
    source: StrictStr | None = None
    reload_error: StrictStr | None = Field(default=None, alias="reloadError")
    scenarios: tuple[ScenarioSummary, ...] = ()


class ScenarioDetail(_Wire):
    """``GET /v1/scenarios/{name}``: the scenario and every picked node's state."""

    name: StrictStr
    revision: Millis
    start_ms: Millis = Field(alias="startMs")
    scenario: dict[str, Any]
    states: dict[str, int]
    nodes: tuple[NodeStatus, ...] = ()
