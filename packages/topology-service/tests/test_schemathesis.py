"""Property-based requests generated from the service's own OpenAPI schema: never a 5xx.

schemathesis builds valid and invalid requests (odd node names, out-of-range and
mistyped query parameters, stray headers) for every documented operation and
sends them to the app in process; whatever it sends, the answer is a 2xx, 3xx or
4xx, never a server error.
"""

from __future__ import annotations

import schemathesis
from conftest import document
from hypothesis import HealthCheck, settings
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.api import create_app
from nvml_mock_topology.store import TopologyStore
from schemathesis.checks import not_a_server_error

# Short watches: a generated request that happens to start one must not stall the run.
app = create_app(
    TopologyStore.from_document(parse_topology(document()), source="topology.yaml"),
    max_watch_seconds=0.01,
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_no_server_errors(case: schemathesis.Case) -> None:
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])
    assert response.status_code < 500


@schema.parametrize()
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_answers_conform_to_the_schema(case: schemathesis.Case) -> None:
    case.call_and_validate()
