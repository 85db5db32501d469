"""The scenario endpoints of the HTTP API, and their metrics.

Reading stays open, as the identity does: ``GET /v1/nodes/{node}/scenarios`` (with the
identity's watch contract: ``revision`` + ``wait``, ``If-None-Match``, the revision in
``X-Scenarios-Revision``), ``GET /v1/scenarios`` and ``GET /v1/scenarios/{name}``.
The agents' reports are the service's only write API: off unless a token file is
configured, and then every report needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any, Final

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.responses import Response
from nvml_mock_protocol.identity import ErrorBody
from nvml_mock_protocol.names import (
    SCENARIOS_LIST_PATH,
    SCENARIOS_NODE_PATH,
    SCENARIOS_REPORT_PATH,
)
from nvml_mock_protocol.scenario_api import NodeReport, NodeScenarios, ScenarioDetail, ScenarioList
from nvml_mock_protocol.scenarios import SCENARIO_NAME_MAX_LENGTH
from nvml_mock_protocol.topology import NODE_NAME_MAX_LENGTH, NODE_NAME_PATTERN, node_name_problem
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from nvml_mock_topology.errors import ProblemError
from nvml_mock_topology.scenarios import ScenarioFile, ScenarioStore, WriteAccess

__all__ = ["add_scenario_routes"]

_PREFIX: Final = "nvml_mock_topology"
_NODE_SCHEMA: Final = {
    "pattern": NODE_NAME_PATTERN,
    "minLength": 1,
    "maxLength": NODE_NAME_MAX_LENGTH,
}
"""Documented, not enforced by FastAPI: the endpoint's own check says why a name fails."""
_REPORT_MAX_BYTES: Final = 1 << 20
_LATENCY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


class _ScenarioCollector(Collector):
    def __init__(self, store: ScenarioStore, follower: ScenarioFile | None) -> None:
        self.store = store
        self.follower = follower

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
            ("scenario_reports", "Agent reports taken", self.store.reports),
            (
                "scenario_reload_failures",
                "Scenario file versions refused",
                self.follower.failures if self.follower else 0,
            ),
        )
        for name, text, value in gauges:
            yield GaugeMetricFamily(f"{_PREFIX}_{name}", text, value=value)


def _node(node: str) -> str:
    problem = node_name_problem(node)
    if problem is not None:
        raise ProblemError(422, f"invalid node name {node[:80]!r}: {problem}")
    return node


def _raw(status: int, headers: tuple[tuple[bytes, bytes], ...], body: bytes) -> Response:
    response = Response(content=body, status_code=status)
    response.raw_headers = list(headers)
    return response


def add_scenario_routes(
    app: FastAPI,
    store: ScenarioStore,
    write: WriteAccess,
    registry: CollectorRegistry,
    follower: ScenarioFile | None,
    *,
    max_watch_seconds: float,
) -> None:
    """Add the scenario endpoints to ``app`` and their metrics to ``registry``."""
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
    registry.register(_ScenarioCollector(store, follower))

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
        wait: Annotated[float | None, Query(ge=0, le=86400)] = None,
    ) -> Response:
        _node(node)
        header = request.headers.get("if-none-match")
        known = revision
        if known is None and header is not None and header.strip('W/"').isdigit():
            known = int(header.strip('W/"'))
        if wait is not None and wait > 0:
            if known is None:
                known = store.snapshot.node_revision(node)
            gone = asyncio.ensure_future(_disconnected(request))
            try:
                answer = await store.watch(node, known, min(wait, max_watch_seconds), gone)
            finally:
                gone.cancel()
        else:
            answer = store.snapshot.answer(node)
        if header is not None and header.strip().removeprefix("W/") == answer.etag.decode():
            return _raw(304, answer.not_modified_headers, b"")
        return _raw(answer.status, answer.headers, answer.body)

    @app.post(
        SCENARIOS_REPORT_PATH,
        responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}, **errors},
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
    ) -> dict[str, int]:
        # The token is checked before the body is read: nobody else gets the parser.
        try:
            write.check(authorization)
            _node(node)
            body = await _report_body(request)
        except ProblemError:
            refused.inc()
            raise
        before = len(store.latencies)
        taken = store.report(node, body)
        for seconds in store.latencies[before:]:
            latency.observe(seconds)
        del store.latencies[:]
        return {"taken": taken}

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


async def _report_body(request: Request) -> NodeReport:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
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


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (a GET's first message is its empty body)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
