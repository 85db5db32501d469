"""HTTP schemas of the topology service: what a node's identity looks like on the wire.

The service and its clients (the NRI plugin, check-fabric, ``curl`` users)
share these models so that a renamed field breaks a test instead of a cluster.
Field names on the wire are camelCase (``clusterUuid``, ``cliqueId``) as in the
API contract; Python attributes are snake_case.

Revisions and the watch
-----------------------
``NodeIdentity.revision`` is the topology revision at which *this node's*
answer last changed (its placement, or it being in no clique). Revisions are
integers that only grow, across reloads and across restarts of the service
(they are taken from the wall clock in milliseconds when a change is seen, or
the previous revision plus one, whichever is larger). A client that holds
revision ``N`` asks ``GET /v1/nodes/{node}/identity?revision=N&wait=S``; the
answer comes as soon as the node's revision differs from ``N``, or unchanged
after ``S`` seconds. A 404 carries the revision of the node's absence in its
body and in the ``X-Topology-Revision`` header, so absent nodes can be watched
the same way. The strong ``ETag`` of an identity is its revision in quotes.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from nvml_mock_protocol.names import (
    ENV_FABRIC_CLIQUE_ID,
    ENV_FABRIC_CLUSTER_UUID,
    ENV_FABRIC_DOMAIN,
)
from nvml_mock_protocol.topology import (
    CliqueId,
    ClusterUuid,
    NodeName,
    NodePlacement,
    TopologyDocument,
)

__all__ = [
    "REVISION_HEADER",
    "REVISION_QUERY",
    "WAIT_QUERY",
    "ErrorBody",
    "NodeIdentity",
    "TopologyResponse",
]

REVISION_HEADER: Final = "X-Topology-Revision"
"""Response header carrying the node's revision on identity answers (200, 304 and 404)."""
REVISION_QUERY: Final = "revision"
"""Query parameter: the revision the caller already has (starts a watch together with ``wait``)."""
WAIT_QUERY: Final = "wait"
"""Query parameter: seconds to wait for a change (the server caps it)."""

Revision = Annotated[StrictInt, Field(ge=0)]


class NodeIdentity(BaseModel):
    """``GET /v1/nodes/{node}/identity``: the ComputeDomain identity of one node."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    node: NodeName
    """The node's name (a DNS-1123 subdomain)."""
    domain: StrictStr
    """ComputeDomain name; injected as ``MOCK_FABRIC_DOMAIN``."""
    cluster_uuid: ClusterUuid = Field(alias="clusterUuid")
    """The domain's cluster UUID (lowercase); injected as ``MOCK_FABRIC_CLUSTER_UUID``."""
    clique_id: CliqueId = Field(alias="cliqueId")
    """NVLink clique id (uint32); injected as ``MOCK_FABRIC_CLIQUE_ID``."""
    revision: Revision
    """Topology revision at which this node's identity last changed."""

    @classmethod
    def from_placement(cls, placement: NodePlacement, revision: int) -> NodeIdentity:
        """The identity of a node placed by a topology document, at ``revision``."""
        return cls(
            node=placement.node,
            domain=placement.domain,
            clusterUuid=placement.cluster_uuid,
            cliqueId=placement.clique_id,
            revision=revision,
        )

    def placement(self) -> NodePlacement:
        """The placement this identity describes (without the revision)."""
        return NodePlacement(self.node, self.domain, self.cluster_uuid, self.clique_id)

    def to_json_bytes(self) -> bytes:
        """The wire form: compact JSON with camelCase keys."""
        return self.model_dump_json(by_alias=True).encode()

    def fabric_env(self) -> dict[str, str]:
        """The fabric identity env vars a container on this node gets."""
        return {
            ENV_FABRIC_CLUSTER_UUID: self.cluster_uuid,
            ENV_FABRIC_CLIQUE_ID: str(self.clique_id),
            ENV_FABRIC_DOMAIN: self.domain,
        }


class TopologyResponse(BaseModel):
    """``GET /v1/topology``: the document being served and its revision."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    revision: Revision
    """Revision of the whole document (the largest node revision, or later)."""
    topology: TopologyDocument


class ErrorBody(BaseModel):
    """The body of every error answer: one human-readable sentence in ``detail``.

    404 answers to identity requests also carry the node's ``revision`` (see the
    module docstring); other errors leave it out.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    detail: StrictStr
    revision: Revision | None = None
