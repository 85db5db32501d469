"""Validation of the topology service's identity answer, and the identity URL."""

from __future__ import annotations

import json

import pytest
from check_fabric.errors import IdentityLookupError
from check_fabric.model import Identity
from check_fabric.topology import identity_url, parse_identity

URL = "http://t/v1/nodes/w1/identity"
GOOD = {
    "node": "w1",
    "domain": "cd",
    "clusterUuid": "00000000-0000-0000-0000-0000000000CD",
    "cliqueId": 1,
    "revision": 3,
}


def _body(**changes: object) -> bytes:
    doc = dict(GOOD, **changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def test_identity_url_quotes_the_node_and_joins_the_path() -> None:
    assert identity_url("http://t:8090/", "w1") == "http://t:8090/v1/nodes/w1/identity"
    assert identity_url("http://t/api", "a/b c") == "http://t/api/v1/nodes/a%2Fb%20c/identity"


def test_a_good_answer() -> None:
    answer = parse_identity(URL, "w1", _body())
    assert answer.identity == Identity("00000000-0000-0000-0000-0000000000cd", 1)
    assert (answer.node, answer.domain, answer.revision, answer.url) == ("w1", "cd", 3, URL)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>", "answer is not JSON"),
        (b"[1]", "not a JSON object: list"),
        (_body(clusterUuid=...), "clusterUuid=None is not a string"),
        (_body(clusterUuid="zz"), "'zz' is not a UUID"),
        (_body(cliqueId="1"), "cliqueId='1' is not a uint32"),
        (_body(cliqueId=True), "cliqueId=True is not a uint32"),
        (_body(cliqueId=-1), "cliqueId=-1 is not a uint32"),
        (_body(cliqueId=2**32), "is not a uint32"),
        (_body(node="w2"), "answer is for node 'w2', not 'w1'"),
        (_body(revision="3"), "revision='3' is not an integer"),
    ],
)
def test_bad_answers_are_named(body: bytes, reason: str) -> None:
    with pytest.raises(IdentityLookupError) as info:
        parse_identity(URL, "w1", body)
    assert reason in info.value.reason
    assert str(info.value).startswith(f"topology: GET {URL}: ")


def test_the_protocol_identity_model_wire_form_is_understood() -> None:
    from nvml_mock_protocol.identity import NodeIdentity

    wire = NodeIdentity(
        node="w1",
        domain="cd",
        clusterUuid="00000000-0000-0000-0000-0000000000cd",
        cliqueId=4,
        revision=9,
    ).to_json_bytes()
    answer = parse_identity(URL, "w1", wire)
    assert answer.identity == Identity("00000000-0000-0000-0000-0000000000cd", 4)
    assert (answer.domain, answer.revision) == ("cd", 9)
