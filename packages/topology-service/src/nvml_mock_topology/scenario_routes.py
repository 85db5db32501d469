"""The scenario endpoints of the HTTP API, and their metrics.

Reading stays open, as the identity does: ``GET /v1/nodes/{node}/scenarios`` (with the
identity's watch contract: ``revision`` + ``wait``, ``If-None-Match``, the revision in
``X-Scenarios-Revision``), ``GET /v1/scenarios`` and ``GET /v1/scenarios/{name}``.
The agents' reports are the service's only write API: off unless a token file is
configured, and then every report needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any, Final

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.responses import Response
from nvml_mock_live.scenario_api import NodeReport, NodeScenarios, ScenarioDetail, ScenarioList
from nvml_mock_live.scenarios import SCENARIO_NAME_MAX_LENGTH
from nvml_mock_protocol.identity import ErrorBody
from nvml_mock_protocol.names import (
    SCENARIOS_LIST_PATH,
    SCENARIOS_NODE_PATH,
    SCENARIOS_REPORT_PATH,
)
from nvml_mock_protocol.topology import NODE_NAME_MAX_LENGTH, NODE_NAME_PATTERN, node_name_problem
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from nvml_mock_topology.errors import ProblemError
from nvml_mock_topology.raw_answers import (
    Headers,
    Receive,
    disconnected,
    header_value,
    raw_response,
    send_answer,
    watch_query,
    watch_route,
)
from nvml_mock_topology.report_budget import ReportBudget
from nvml_mock_topology.scenarios import ScenarioFile, ScenarioStore, WriteAccess

__all__ = ["ReportEndpoint", "ReportFastPath", "add_scenario_routes"]

_PREFIX: Final = "nvml_mock_topology"
_NODE_SCHEMA: Final = {
    "pattern": NODE_NAME_PATTERN,
    "minLength": 1,
    "maxLength": NODE_NAME_MAX_LENGTH,
}
"""Documented, not enforced by FastAPI: the endpoint's own check says why a name fails."""
_REPORT_MAX_BYTES: Final = 1 << 20
_NODES_PREFIX: Final = SCENARIOS_REPORT_PATH.split("{", 1)[0]  # "/v1/nodes/"
_REPORT_SUFFIX: Final = SCENARIOS_REPORT_PATH.rsplit("}", 1)[1]  # "/scenarios/status"
_SCENARIOS_SUFFIX: Final = SCENARIOS_NODE_PATH.rsplit("}", 1)[1]  # "/scenarios"
_LATENCY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


class _ScenarioCollector(Collector):
    def __init__(
        self, store: ScenarioStore, follower: ScenarioFile | None, budget: ReportBudget
    ) -> None:
        self.store = store
        self.follower = follower
        self.budget = budget

    def collect(self) -> Iterator[Metric]:
        snapshot = self.store.snapshot
        applied, failed = self.store.applied_failed()
        active = sum(1 for name in snapshot.versions if self.store.counts(name)["applied"] > 0)
        gauges = (
            ("scenarios", "Scenarios in the served scenario document", len(snapshot.versions)),
            ("scenarios_active", "Scenarios applied on at least one node now", active),
            ("scenarios_revision", "Revision of the served scenarios", snapshot.revision),
            ("scenario_nodes_applied", "Node-scenario pairs reported applied", applied),
            ("scenario_nodes_failed", "Node-scenario pairs reported failed", failed),
            ("scenario_watchers", "Scenario watch requests waiting", self.store.watching),
            (
                "scenario_reload_failing",
                "1 while the newest scenario file is refused (the last good one serves)",
                0 if self.store.error is None else 1,
            ),
        )
        for name, text, value in gauges:
            yield GaugeMetricFamily(f"{_PREFIX}_{name}", text, value=value)
        # Counters, named as the topology's own (``_total`` on the wire).
        counters = (
            ("scenario_reports", "Agent reports taken", self.store.reports),
            (
                "scenario_reports_throttled",
                "Agent reports answered 429 (over --report-rate); the agent retries later",
                self.budget.refused,
            ),
            (
                "scenario_reloads",
                "Scenario file versions published",
                self.follower.reloads if self.follower else 0,
            ),
            (
                "scenario_reload_failures",
                "Scenario file versions refused",
                self.follower.failures if self.follower else 0,
            ),
        )
        for name, text, value in counters:
            yield CounterMetricFamily(f"{_PREFIX}_{name}", text, value=value)


def _node(node: str) -> str:
    problem = node_name_problem(node)
    if problem is not None:
        raise ProblemError(422, f"invalid node name {node[:80]!r}: {problem}")
    return node


def add_scenario_routes(
    app: FastAPI,
    store: ScenarioStore,
    write: WriteAccess,
    registry: CollectorRegistry,
    follower: ScenarioFile | None,
    *,
    max_watch_seconds: float,
    budget: ReportBudget | None = None,
) -> ReportEndpoint:
    """Add the scenario endpoints to ``app`` and their metrics to ``registry``.

    Returns the report endpoint, for :class:`ReportFastPath` in front of the app.
    """
    latency = Histogram(
        f"{_PREFIX}_scenario_apply_latency_seconds",
        "From a scenario run's start to the agent's write in the live layer (reported)",
        buckets=_LATENCY_BUCKETS,
        registry=registry,
    )
    refused = Counter(
        f"{_PREFIX}_scenario_reports_refused",
        "Agent reports refused (write API off, no or wrong token, bad body)",
        registry=registry,
    )
    budget = budget or ReportBudget(0)
    registry.register(_ScenarioCollector(store, follower, budget))
    endpoint = ReportEndpoint(store, write, latency, refused, budget)
    watch_endpoint = NodeScenariosEndpoint(store, max_watch_seconds)
    endpoint.watch = watch_endpoint

    async def problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        body = ErrorBody(detail=exc.detail).model_dump_json(exclude_none=True).encode()
        return Response(body, status_code=exc.status, media_type="application/json")

    app.add_exception_handler(ProblemError, problem)
    errors: dict[int | str, dict[str, Any]] = {422: {"model": ErrorBody}}

    @app.get(
        SCENARIOS_NODE_PATH,
        response_model=NodeScenarios,
        responses={304: {"description": "Unchanged"}, **errors},
        summary="The scenarios selecting one node (optionally: wait for them to change)",
        tags=["scenarios"],
    )
    async def node_scenarios(
        request: Request,
        node: Annotated[
            str, Path(description="Kubernetes node name", json_schema_extra=_NODE_SCHEMA)
        ],
        revision: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
        wait: Annotated[
            float | None, Query(ge=0, description="Seconds to wait for a change (capped)")
        ] = None,
    ) -> Response:
        return await watch_route(watch_endpoint.answer, request, node, revision, wait)

    @app.post(
        SCENARIOS_REPORT_PATH,
        responses={
            401: {"model": ErrorBody},
            403: {"model": ErrorBody},
            429: {"model": ErrorBody, "description": "Over the report budget; see Retry-After"},
            **errors,
        },
        summary="An agent's report of what it applied (the write API; off by default)",
        tags=["scenarios"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": NodeReport.model_json_schema()}},
            }
        },
    )
    async def report(
        request: Request,
        node: Annotated[
            str, Path(description="Kubernetes node name", json_schema_extra=_NODE_SCHEMA)
        ],
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        status, headers, body = await endpoint.answer(
            node, authorization.encode("latin-1") if authorization else None, request.receive
        )
        return raw_response(status, headers, body)

    @app.get(
        SCENARIOS_LIST_PATH,
        response_model=ScenarioList,
        response_model_by_alias=True,
        response_model_exclude_none=True,
        tags=["scenarios"],
    )
    async def listing() -> ScenarioList:
        return store.listing()

    @app.get(
        SCENARIOS_LIST_PATH + "/{name}",
        response_model=ScenarioDetail,
        response_model_by_alias=True,
        responses={404: {"model": ErrorBody}},
        tags=["scenarios"],
    )
    async def detail(
        name: Annotated[
            str,
            Path(
                description="Scenario name",
                json_schema_extra={"minLength": 1, "maxLength": SCENARIO_NAME_MAX_LENGTH},
            ),
        ],
    ) -> ScenarioDetail:
        return store.detail(name)

    return endpoint


_JSON: Final = (b"content-type", b"application/json")


def _json_answer(status: int, body: bytes) -> tuple[int, Headers, bytes]:
    return status, (_JSON, (b"content-length", b"%d" % len(body))), body


class NodeScenariosEndpoint:
    """``GET /v1/nodes/{node}/scenarios``, for the FastAPI route and the fast path: the
    identity's watch contract, answered from the snapshot's bytes."""

    def __init__(self, store: ScenarioStore, max_watch_seconds: float) -> None:
        self.store = store
        self.max_watch_seconds = max_watch_seconds

    async def answer(
        self,
        node: str,
        revision: str | None,
        wait: str | None,
        if_none_match: bytes | None,
        receive: Receive,
    ) -> tuple[int, Headers, bytes]:
        try:
            _node(node)
            known = _whole(revision, "revision") if revision is not None else None
            seconds = _seconds(wait) if wait is not None else 0.0
        except ProblemError as problem:
            body = ErrorBody(detail=problem.detail).model_dump_json(exclude_none=True)
            return _json_answer(problem.status, body.encode())
        tag = if_none_match.strip().removeprefix(b"W/") if if_none_match is not None else None
        if known is None and tag is not None and tag.strip(b'"').isdigit() and len(tag) < 22:
            known = int(tag.strip(b'"'))
        if seconds > 0:
            if known is None:
                known = self.store.snapshot.node_revision(node)
            gone = asyncio.ensure_future(disconnected(receive))
            try:
                answer = await self.store.watch(
                    node, known, min(seconds, self.max_watch_seconds), gone
                )
            finally:
                gone.cancel()
        else:
            answer = self.store.snapshot.answer(node)
        if tag is not None and tag == answer.etag:
            return 304, answer.not_modified_headers, b""
        return answer.status, answer.headers, answer.body


def _whole(text: str, name: str) -> int:
    if text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= 2**63 - 1:
        return int(text)
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if number.is_integer() and 0 <= number <= 2**63 - 1:
        return int(number)
    raise ProblemError(
        422, f"query parameter {name!r} must be a non-negative integer, got {text[:40]!r}"
    )


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (0 <= seconds < float("inf")):
        raise ProblemError(
            422, f"query parameter 'wait' must be a number of seconds >= 0, got {text[:40]!r}"
        )
    return seconds


class ReportEndpoint:
    """``POST /v1/nodes/{node}/scenarios/status``, for the FastAPI route and the fast path.

    10,000 agents report when a scenario lands on every node at once; answering them
    without routing, dependency injection or response models keeps identity lookups fast
    meanwhile (``bench/bench_scenarios.py``).
    """

    def __init__(
        self,
        store: ScenarioStore,
        write: WriteAccess,
        latency: Histogram,
        refused: Counter,
        budget: ReportBudget | None = None,
    ) -> None:
        self.store = store
        self.write = write
        self.latency = latency
        self.refused = refused
        self.budget = budget or ReportBudget(0)
        self.watch: NodeScenariosEndpoint | None = None
        """The node-scenarios endpoint, answered by the same fast path."""

    async def answer(
        self, node: str, authorization: bytes | None, receive: Receive
    ) -> tuple[int, Headers, bytes]:
        # The token is checked before the body is read: nobody else gets the parser. Past
        # the budget the body is not read either: a refusal costs what a lookup costs.
        try:
            self.write.check(authorization.decode("latin-1") if authorization else None)
            _node(node)
            wait = self.budget.take()
            if wait:
                return _busy(wait)
            report = await _report_body(receive)
        except ProblemError as problem:
            self.refused.inc()
            body = ErrorBody(detail=problem.detail).model_dump_json(exclude_none=True)
            return _json_answer(problem.status, body.encode())
        before = len(self.store.latencies)
        taken = self.store.report(node, report)
        for seconds in self.store.latencies[before:]:
            self.latency.observe(seconds)
        del self.store.latencies[:]
        return _json_answer(200, b'{"taken":%d}' % taken)


def _busy(seconds: int) -> tuple[int, Headers, bytes]:
    """429: over the report budget; ``Retry-After`` books the agent a later slot."""
    body = b'{"detail":"over the report budget (--report-rate); retry after %d s"}' % seconds
    headers = (_JSON, (b"content-length", b"%d" % len(body)), (b"retry-after", b"%d" % seconds))
    return 429, headers, body


class ReportFastPath:
    """ASGI layer that answers agents' reports itself (the FastAPI route gives the same)."""

    def __init__(self, app: Any, endpoint: ReportEndpoint) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Any) -> None:
        path: str = scope.get("path", "")
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and path.startswith(_NODES_PREFIX)
            and path.endswith(_REPORT_SUFFIX)
            and "/" not in path[len(_NODES_PREFIX) : -len(_REPORT_SUFFIX)]
        ):
            node = path[len(_NODES_PREFIX) : -len(_REPORT_SUFFIX)]
            authorization = header_value(scope, b"authorization")
            status, headers, body = await self.endpoint.answer(node, authorization, receive)
            await send_answer(send, status, headers, body)
            return
        watch = self.endpoint.watch
        if (
            watch is not None
            and scope["type"] == "http"
            and scope["method"] == "GET"
            and path.startswith(_NODES_PREFIX)
            and path.endswith(_SCENARIOS_SUFFIX)
            and "/" not in path[len(_NODES_PREFIX) : -len(_SCENARIOS_SUFFIX)]
        ):
            node = path[len(_NODES_PREFIX) : -len(_SCENARIOS_SUFFIX)]
            revision, wait = watch_query(scope["query_string"])
            if_none_match = header_value(scope, b"if-none-match")
            status, headers, body = await watch.answer(node, revision, wait, if_none_match, receive)
            await send_answer(send, status, headers, body)
            return
        await self.app(scope, receive, send)


async def _report_body(receive: Receive) -> NodeReport:
    raw = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ProblemError(400, "the client went away before its report was complete")
        raw += message.get("body", b"")
        more = message.get("more_body", False)
        if len(raw) > _REPORT_MAX_BYTES:
            raise ProblemError(413, f"a report is at most {_REPORT_MAX_BYTES} bytes")
    try:
        return NodeReport.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False)[:10]
        )
        raise ProblemError(422, f"invalid report: {problems[:2000]}") from None
