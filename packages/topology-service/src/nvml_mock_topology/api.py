"""The HTTP API (v1) of the topology service, as a FastAPI app.

FastAPI gives the OpenAPI schema, ``/docs`` and the less frequent endpoints.
The identity lookup, which every NRI plugin in the cluster calls and watches,
is also answered by :class:`IdentityFastPath`, a plain ASGI layer in front of
FastAPI that serves the snapshot's precomputed bytes without routing,
dependency injection or model serialisation. Both paths call the same
:meth:`IdentityEndpoint.answer`, so they cannot disagree; a test checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Annotated, Any, Final

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from nvml_mock_protocol.identity import (
    REVISION_QUERY,
    WAIT_QUERY,
    ErrorBody,
    NodeIdentity,
    TopologyResponse,
)
from nvml_mock_protocol.names import (
    SCENARIOS_LIST_PATH,
    TOPOLOGY_DOCUMENT_PATH,
    TOPOLOGY_IDENTITY_PATH,
)
from nvml_mock_protocol.topology import (
    NODE_NAME_MAX_LENGTH,
    NODE_NAME_PATTERN,
    node_name_problem,
)
from pydantic import BaseModel

from nvml_mock_topology._version import __version__
from nvml_mock_topology.errors import ProblemError
from nvml_mock_topology.metrics import Metrics
from nvml_mock_topology.raw_answers import (
    Receive,
    disconnected,
    header_value,
    raw_response,
    send_answer,
    watch_query,
    watch_route,
)
from nvml_mock_topology.report_budget import ReportBudget
from nvml_mock_topology.scenario_routes import ReportFastPath, add_scenario_routes
from nvml_mock_topology.scenarios import ScenarioFile, ScenarioStore, WriteAccess
from nvml_mock_topology.snapshot import Answer
from nvml_mock_topology.source import TopologyFile
from nvml_mock_topology.store import TopologyStore

__all__ = ["HealthBody", "IdentityEndpoint", "IdentityFastPath", "ReadyBody", "create_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_PREFIX: Final = TOPOLOGY_IDENTITY_PATH.split("{", 1)[0]  # "/v1/nodes/"
_SUFFIX: Final = TOPOLOGY_IDENTITY_PATH.rsplit("}", 1)[1]  # "/identity"
_REVISION_MAX: Final = 2**63 - 1
_REVISION_DIGITS: Final = len(str(_REVISION_MAX))
_JSON_HEADERS: Final = ((b"content-type", b"application/json"),)
_CLOSE_HEADER: Final = (b"connection", b"close")


def _problem_answer(problem: ProblemError) -> tuple[int, tuple[tuple[bytes, bytes], ...], bytes]:
    body = ErrorBody(detail=problem.detail).model_dump_json(exclude_none=True).encode()
    headers = (*_JSON_HEADERS, (b"content-length", b"%d" % len(body)))
    return problem.status, headers, body


def _shown(value: object, limit: int = 80) -> str:
    """A client-sent value for a message: its repr, cut before rendering, never megabytes."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[: limit - 20]!r}... ({len(value)} characters)"
    text = (
        repr(value) if not isinstance(value, int) or value.bit_length() <= 128 else "a huge integer"
    )
    return text if len(text) <= limit else text[:limit] + "..."


class HealthBody(BaseModel):
    """``/healthz``: whether the process can do its job (its file follower is running)."""

    status: str
    detail: str | None = None


class ReadyBody(BaseModel):
    """``/readyz``: what is served, and whether the newest version of the file was refused.

    ``status`` is ``ready``, or ``degraded`` when the newest topology or scenario file was refused;
    a degraded service still answers from the last good document, so it stays ready
    (HTTP 200) and ``reloadError`` says what is wrong with the file. ``loading`` names a
    file whose new version is being read right now and for how long (the last good
    document serves meanwhile). ``draining`` (HTTP 503) is a service that was told to stop
    and answers for its drain time while the endpoints controller and kube-proxy stop
    sending it new connections.
    """

    status: str
    revision: int
    nodes: int
    source: str | None
    reloadError: str | None = None  # noqa: N815 - wire name
    scenarioReloadError: str | None = None  # noqa: N815 - wire name
    loading: tuple[str, ...] | None = None


def _if_none_match_hits(header: bytes | None, etag: bytes) -> bool:
    """RFC 9110 weak comparison of ``If-None-Match`` against the answer's strong ETag."""
    if header is None or not etag:
        return False
    for candidate in header.split(b","):
        tag = candidate.strip()
        if tag == b"*":
            return True
        if tag.startswith(b"W/"):
            tag = tag[2:]
        if tag == etag:
            return True
    return False


def _parse_revision(text: str) -> int | None:
    """A revision from a query parameter; JSON Schema integers such as ``7.0`` count."""
    if text.isascii() and text.isdigit():
        return int(text) if len(text) <= 19 and int(text) <= _REVISION_MAX else None
    try:
        number = float(text)
    except ValueError:
        return None
    if number.is_integer() and 0 <= number <= _REVISION_MAX:
        return int(number)
    return None


def _revision_from_etag(header: bytes | None) -> int | None:
    """The revision an ``If-None-Match`` names, or None when it names none this service issues.

    Only a tag of at most 19 digits within the revision range can be one of ours; anything
    else (a list of tags, ``*``, 5,000 digits) matches no revision, as the RFC would have it,
    and is never converted (Python refuses to convert integers past 4,300 digits).
    """
    if header is None:
        return None
    tag = header.strip()
    if tag.startswith(b"W/"):
        tag = tag[2:]
    digits = tag[1:-1]
    if (
        len(tag) > 2
        and tag[:1] == tag[-1:] == b'"'
        and len(digits) <= _REVISION_DIGITS
        and digits.isdigit()
    ):
        revision = int(digits)
        return revision if revision <= _REVISION_MAX else None
    return None


class IdentityEndpoint:
    """``GET /v1/nodes/{node}/identity``: lookup, watch and conditional answers."""

    def __init__(self, store: TopologyStore, max_watch_seconds: float) -> None:
        self.store = store
        self.max_watch_seconds = max_watch_seconds

    def parse(
        self, node: str, revision: str | None, wait: str | None, if_none_match: bytes | None
    ) -> tuple[int | None, float]:
        """Check the request; returns the known revision (None: no watch) and the wait."""
        problem = node_name_problem(node)
        if problem is not None:
            raise ProblemError(422, f"invalid node name {_shown(node)}: {problem}")
        known: int | None = None
        if revision is not None:
            known = _parse_revision(revision)
            if known is None:
                raise ProblemError(
                    422,
                    f"query parameter {REVISION_QUERY!r} must be a non-negative integer "
                    f"(a revision from an earlier answer), got {_shown(revision)}",
                )
        seconds = 0.0
        if wait is not None:
            try:
                seconds = float(wait)
            except ValueError:
                seconds = -1.0
            if not (seconds >= 0 and seconds != float("inf")):
                raise ProblemError(
                    422,
                    f"query parameter {WAIT_QUERY!r} must be a number of seconds >= 0, "
                    f"got {_shown(wait)}",
                )
            if known is None:
                known = _revision_from_etag(if_none_match)
            if known is None:
                # Nothing to compare against: wait for the node's next change from now on.
                known = self.store.snapshot.node_revision(node)
        return known, min(seconds, self.max_watch_seconds)

    async def answer(
        self,
        node: str,
        revision: str | None,
        wait: str | None,
        if_none_match: bytes | None,
        receive: Receive | None = None,
    ) -> tuple[int, tuple[tuple[bytes, bytes], ...], bytes]:
        """Status, raw headers and body of the answer to one identity request.

        With ``receive`` (the request's ASGI channel), a watch also ends when the
        client goes away, so a restarted client leaves no waiter behind.
        """
        try:
            known, seconds = self.parse(node, revision, wait, if_none_match)
        except ProblemError as problem:
            return _problem_answer(problem)
        answer: Answer
        if known is not None and seconds > 0:
            gone = asyncio.ensure_future(disconnected(receive)) if receive is not None else None
            try:
                answer = await self.store.watch(node, known, seconds, gone=gone)
            finally:
                if gone is not None:
                    gone.cancel()
        else:
            answer = self.store.snapshot.identity(node)
        if answer.status == 200 and _if_none_match_hits(if_none_match, answer.etag):
            status, headers, body = 304, answer.not_modified_headers, b""
        else:
            status, headers, body = answer.status, answer.headers, answer.body
        if self.store.closing:
            # Shutting down: the client's next request (a re-watch) goes to another replica.
            headers = (*headers, _CLOSE_HEADER)
        return status, headers, body


class IdentityFastPath:
    """ASGI layer that answers identity requests itself and measures every request.

    With ``endpoint=None`` it only measures, and the FastAPI route answers identities.
    """

    def __init__(self, app: ASGIApp, endpoint: IdentityEndpoint | None, metrics: Metrics) -> None:
        self.app = app
        self.endpoint = endpoint
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        if (
            self.endpoint is not None
            and scope["method"] == "GET"
            and path.startswith(_PREFIX)
            and path.endswith(_SUFFIX)
            and "/" not in path[len(_PREFIX) : -len(_SUFFIX)]
            and len(path) >= len(_PREFIX) + len(_SUFFIX)
        ):
            node = path[len(_PREFIX) : -len(_SUFFIX)]
            revision, wait = watch_query(scope["query_string"])
            if_none_match = header_value(scope, b"if-none-match")
            status, headers, body = await self.endpoint.answer(
                node, revision, wait, if_none_match, receive
            )
            await send_answer(send, status, headers, body)
            label = "identity_watch" if wait is not None else "identity"
            self.metrics.observe(label, status, time.perf_counter() - started)
            return
        status_seen = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status_seen
            if message["type"] == "http.response.start":
                status_seen = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            label = _endpoint_label(path, scope["query_string"])
            self.metrics.observe(label, status_seen, time.perf_counter() - started)


def _endpoint_label(path: str, query: bytes) -> str:
    if path == TOPOLOGY_DOCUMENT_PATH:
        return "topology"
    if path.startswith(_PREFIX) and path.endswith("/scenarios/status"):
        return "scenario_report"
    if path.startswith(_PREFIX) and path.endswith("/scenarios"):
        return "scenarios_watch" if watch_query(query)[1] is not None else "scenarios"
    if path.startswith(SCENARIOS_LIST_PATH):
        return "scenario_status"
    if path.startswith(_PREFIX):
        return "identity_watch" if watch_query(query)[1] is not None else "identity"
    if path in ("/healthz", "/readyz", "/metrics"):
        return path[1:]
    if path.startswith(("/docs", "/openapi.json", "/redoc")):
        return "docs"
    return "other"


_NO_TELEMETRY: Final[dict[str, Any]] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)
"""FastAPI's own OpenTelemetry layer, off where FastAPI has one: the service exports its
metrics itself (``/metrics``), and asking the global providers on every request cost a
third of a report's time in the event loop."""

_ERROR_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    422: {"model": ErrorBody, "description": "Invalid node name or query parameter"},
}


logger = logging.getLogger(__name__)

_STOP_WAIT_SECONDS: Final = 5.0
"""How long the shutdown waits for the file followers to end once cancelled: a backstop, so
that a follower that does not end (a check stuck where cancellation cannot reach) never holds
the process past its grace time."""


async def _stop_tasks(*tasks: asyncio.Task[None] | None) -> None:
    running = [t for t in tasks if t is not None]
    for task in running:
        task.cancel()
    if not running:
        return
    _, pending = await asyncio.wait(running, timeout=_STOP_WAIT_SECONDS)
    for task in pending:
        logger.error("the %s follower did not end when cancelled; left behind", task.get_name())
    for task in running:
        if task.done() and not task.cancelled() and task.exception() is not None:
            logger.error("the %s follower had failed: %s", task.get_name(), task.exception())


def create_app(
    store: TopologyStore,
    follower: TopologyFile | None = None,
    *,
    max_watch_seconds: float = 60.0,
    fast_path: bool = True,
    scenarios: ScenarioStore | None = None,
    scenario_follower: ScenarioFile | None = None,
    write_access: WriteAccess | None = None,
    report_rate: float = 0,
) -> FastAPI:
    """The ASGI app serving ``store``; runs ``follower`` (if any) while the app is up.

    ``fast_path=False`` leaves identity requests to the FastAPI route (same answers,
    slower); the default puts :class:`IdentityFastPath` in front. ``scenarios`` (served
    empty when None) is followed by ``scenario_follower``; ``write_access`` says who may
    report (nobody when None), ``report_rate`` how many reports a second are taken (0: all).
    """
    if scenarios is None:
        scenarios = ScenarioStore.start(store)
    endpoint = IdentityEndpoint(store, max_watch_seconds)
    metrics = Metrics(store, follower)
    follower_task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal follower_task
        if follower is not None:
            follower_task = asyncio.create_task(follower.run(), name="topology-file")
        scenario_task = (
            asyncio.create_task(scenario_follower.run(), name="scenario-file")
            if scenario_follower is not None
            else None
        )
        try:
            yield
        finally:
            await _stop_tasks(scenario_task, follower_task)

    app = FastAPI(
        title="nvml-mock topology service",
        version=__version__,
        description=(
            "Tells each Kubernetes node which ComputeDomain (cluster UUID) and NVLink clique "
            "it belongs to, from a topology document that is reloaded when it changes."
        ),
        lifespan=lifespan,
        **_NO_TELEMETRY,
    )
    app.state.store = store
    app.state.metrics = metrics
    app.state.scenarios = scenarios
    reports = add_scenario_routes(
        app,
        scenarios,
        write_access or WriteAccess(None),
        metrics.registry,
        scenario_follower,
        max_watch_seconds=max_watch_seconds,
        budget=ReportBudget(report_rate),
    )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for error in exc.errors():
            loc = [str(item) for item in error.get("loc", ())]
            where = f"{loc[0]} parameter {'.'.join(loc[1:])!r}" if len(loc) > 1 else ".".join(loc)
            got = f", got {_shown(error['input'])}" if "input" in error else ""
            parts.append(f"{where[:200]}: {error.get('msg', 'invalid')}{got}")
        return JSONResponse(status_code=422, content={"detail": "; ".join(parts)})

    @app.get(
        TOPOLOGY_IDENTITY_PATH,
        response_model=NodeIdentity,
        responses={
            304: {"description": "Unchanged (If-None-Match matched the node's ETag)"},
            404: {"model": ErrorBody, "description": "The node is in no clique"},
            **_ERROR_RESPONSES,
        },
        summary="The ComputeDomain identity of one node (optionally: wait for it to change)",
        tags=["identity"],
    )
    async def identity(
        request: Request,
        node: Annotated[
            str,
            Path(
                description="Kubernetes node name (DNS-1123 subdomain)",
                # Documented, not enforced here: the endpoint's own check says why a name fails.
                json_schema_extra={
                    "pattern": NODE_NAME_PATTERN,
                    "minLength": 1,
                    "maxLength": NODE_NAME_MAX_LENGTH,
                },
            ),
        ],
        revision: Annotated[
            int | None,
            Query(
                ge=0,
                le=_REVISION_MAX,
                description="The revision you have; with wait, starts a watch",
            ),
        ] = None,
        wait: Annotated[
            float | None,
            Query(ge=0, description="Seconds to wait for a change (capped by the server)"),
        ] = None,
    ) -> Response:
        return await watch_route(endpoint.answer, request, node, revision, wait)

    @app.get(
        TOPOLOGY_DOCUMENT_PATH,
        response_model=TopologyResponse,
        responses={304: {"description": "Unchanged (If-None-Match matched the ETag)"}},
        summary="The whole topology document being served and its revision",
        tags=["topology"],
    )
    async def topology(request: Request) -> Response:
        answer = store.snapshot.topology
        header = request.headers.get("if-none-match")
        if header is not None and _if_none_match_hits(header.encode("latin-1"), answer.etag):
            return raw_response(304, answer.not_modified_headers, b"")
        return raw_response(answer.status, answer.headers, answer.body)

    @app.get(
        "/healthz",
        response_model=HealthBody,
        responses={503: {"model": HealthBody}},
        tags=["operations"],
    )
    async def healthz() -> JSONResponse:
        if follower_task is not None and follower_task.done():
            return JSONResponse(
                status_code=503,
                content={"status": "failing", "detail": "the topology file follower stopped"},
            )
        return JSONResponse(content={"status": "ok"})

    @app.get(
        "/readyz",
        response_model=ReadyBody,
        responses={503: {"model": ReadyBody}},
        response_model_exclude_none=True,
        tags=["operations"],
    )
    async def readyz() -> JSONResponse:
        snapshot = store.snapshot
        status = store.status
        loading = tuple(
            f"{kind} file {watched.path}: loading for {seconds:.1f} s"
            for kind, watched in (("topology", follower), ("scenario", scenario_follower))
            if watched is not None and (seconds := watched.loading_seconds) is not None
        )
        state = "ready" if status.ok and scenarios.error is None else "degraded"
        if store.draining:
            state = "draining"
        body = ReadyBody(
            status=state,
            revision=snapshot.revision,
            nodes=snapshot.node_count,
            source=snapshot.source,
            reloadError=status.error,
            scenarioReloadError=scenarios.error,
            loading=loading or None,
        )
        return JSONResponse(
            status_code=503 if store.draining else 200,
            content=body.model_dump(exclude_none=True),
        )

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
        tags=["operations"],
    )
    async def prometheus() -> Response:
        return Response(content=metrics.render(), media_type="text/plain; version=0.0.4")

    if fast_path:
        app.add_middleware(ReportFastPath, endpoint=reports)
    app.add_middleware(
        IdentityFastPath,
        endpoint=endpoint if fast_path else None,
        metrics=metrics,
    )
    return app
