"""The identity HTTP schemas: wire names, round trips, and refusals."""

from __future__ import annotations

import json

import pytest
from nvml_mock_protocol.identity import ErrorBody, NodeIdentity, TopologyResponse
from nvml_mock_protocol.names import (
    ENV_FABRIC_CLIQUE_ID,
    ENV_FABRIC_CLUSTER_UUID,
    ENV_FABRIC_DOMAIN,
)
from nvml_mock_protocol.topology import NodePlacement, parse_topology
from pydantic import ValidationError

PLACEMENT = NodePlacement("worker-1", "demo-domain", "00000000-0000-0000-0000-0000000000ab", 7)


def test_wire_form_uses_the_contract_names() -> None:
    identity = NodeIdentity.from_placement(PLACEMENT, revision=42)
    assert json.loads(identity.to_json_bytes()) == {
        "node": "worker-1",
        "domain": "demo-domain",
        "clusterUuid": "00000000-0000-0000-0000-0000000000ab",
        "cliqueId": 7,
        "revision": 42,
    }


def test_round_trip_and_placement() -> None:
    identity = NodeIdentity.from_placement(PLACEMENT, revision=1)
    again = NodeIdentity.model_validate_json(identity.to_json_bytes())
    assert again == identity
    assert again.placement() == PLACEMENT


def test_unknown_fields_from_a_newer_server_are_ignored() -> None:
    body = json.loads(NodeIdentity.from_placement(PLACEMENT, 3).to_json_bytes())
    body["futureField"] = True
    assert NodeIdentity.model_validate(body).revision == 3


def test_fabric_env() -> None:
    env = NodeIdentity.from_placement(PLACEMENT, revision=1).fabric_env()
    assert env == {
        ENV_FABRIC_CLUSTER_UUID: "00000000-0000-0000-0000-0000000000ab",
        ENV_FABRIC_CLIQUE_ID: "7",
        ENV_FABRIC_DOMAIN: "demo-domain",
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("node", "Worker"),
        ("node", ""),
        ("clusterUuid", "nope"),
        ("cliqueId", -1),
        ("cliqueId", 2**32),
        ("cliqueId", "7"),
        ("revision", -1),
    ],
)
def test_bad_bodies_are_refused(field: str, value: object) -> None:
    body = json.loads(NodeIdentity.from_placement(PLACEMENT, 3).to_json_bytes())
    body[field] = value
    with pytest.raises(ValidationError) as caught:
        NodeIdentity.model_validate(body)
    assert caught.value.errors()[0]["loc"][0] == field


def test_topology_response_round_trip() -> None:
    document = parse_topology(
        "version: 1\ndomains: [{name: d, uuid: "
        + PLACEMENT.cluster_uuid
        + ", cliques: [{id: 0, nodes: [a]}]}]"
    )
    response = TopologyResponse(revision=9, topology=document)
    again = TopologyResponse.model_validate_json(response.model_dump_json())
    assert again == response
    assert again.topology.placement("a") is not None


def test_error_body() -> None:
    assert json.loads(ErrorBody(detail="no").model_dump_json(exclude_none=True)) == {"detail": "no"}
    assert ErrorBody.model_validate({"detail": "gone", "revision": 5}).revision == 5
    with pytest.raises(ValidationError):
        ErrorBody.model_validate({"detail": ["a list"]})
