"""Asking the topology service which ComputeDomain identity a node should have.

Uses only the standard library (``urllib``): check-fabric runs inside workload
containers from the overlay's small runtime, where an HTTP client package
would be weight without benefit for one GET.

``GET {url}/v1/nodes/{node}/identity`` answers
``{"node", "domain", "clusterUuid", "cliqueId", "revision"}``, or 404 when the
node is in no clique. A 404 could also mean the URL points at something that
is not a topology service; the service is then asked for ``/v1/topology`` and
a 404 there too is reported as a wrong URL instead of "no clique".
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import TYPE_CHECKING, Any

from nvml_mock_protocol.names import TOPOLOGY_DOCUMENT_PATH, TOPOLOGY_IDENTITY_PATH

from check_fabric._version import __version__
from check_fabric.errors import IdentityLookupError
from check_fabric.model import UINT32_MAX, Identity, TopologyAnswer, normalize_cluster_uuid

if TYPE_CHECKING:
    import urllib.request

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
"""An identity answer is a few hundred bytes; anything past 1 MiB is refused unread."""


def identity_url(base_url: str, node: str) -> str:
    """The identity endpoint for ``node`` under ``base_url`` (the node name is path-quoted)."""
    path = TOPOLOGY_IDENTITY_PATH.format(node=urllib.parse.quote(node, safe=""))
    return base_url.rstrip("/") + path


def _request(url: str) -> urllib.request.Request:
    import urllib.request

    return urllib.request.Request(
        url,
        headers={"Accept": "application/json", "User-Agent": f"check-fabric/{__version__}"},
    )


def _read_body(resp: Any, url: str) -> bytes:
    body = resp.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise IdentityLookupError(url, f"answer larger than {MAX_BODY_BYTES} bytes")
    return bytes(body)


def _error_body(body: bytes) -> tuple[str, int | None]:
    """``detail`` and ``revision`` of an error answer; the raw text when it is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("detail"), str):
        revision = doc.get("revision")
        valid = isinstance(revision, int) and not isinstance(revision, bool)
        return str(doc["detail"]), revision if valid else None
    return body[:200].decode("utf-8", "replace").strip() or "(empty body)", None


def parse_identity(url: str, node: str, body: bytes) -> TopologyAnswer:
    """Validate a 200 answer; every defect is named with the field and value."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise IdentityLookupError(url, f"answer is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise IdentityLookupError(url, f"answer is not a JSON object: {type(doc).__name__}")
    raw_uuid = doc.get("clusterUuid")
    if not isinstance(raw_uuid, str):
        raise IdentityLookupError(url, f"answer field clusterUuid={raw_uuid!r} is not a string")
    try:
        cluster_uuid = normalize_cluster_uuid(raw_uuid)
    except ValueError as exc:
        raise IdentityLookupError(url, f"answer field clusterUuid: {exc}") from None
    clique = doc.get("cliqueId")
    if isinstance(clique, bool) or not isinstance(clique, int) or not 0 <= clique <= UINT32_MAX:
        raise IdentityLookupError(url, f"answer field cliqueId={clique!r} is not a uint32")
    answered_node = doc.get("node")
    if answered_node is not None and answered_node != node:
        raise IdentityLookupError(url, f"answer is for node {answered_node!r}, not {node!r}")
    domain = doc.get("domain")
    revision = doc.get("revision")
    if isinstance(revision, bool) or not (revision is None or isinstance(revision, int)):
        raise IdentityLookupError(url, f"answer field revision={revision!r} is not an integer")
    return TopologyAnswer(
        url=url,
        node=node,
        identity=Identity(cluster_uuid, clique),
        domain=domain if isinstance(domain, str) else None,
        revision=revision,
    )


def _is_topology_service(base_url: str, timeout: float) -> bool:
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + TOPOLOGY_DOCUMENT_PATH
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as resp:
            return 200 <= int(resp.status) < 300
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code) != 404
    except (urllib.error.URLError, OSError):
        return False


def lookup(base_url: str, node: str, timeout: float) -> TopologyAnswer:
    """Ask the service for ``node``'s identity; 404 means "in no clique"."""
    # Imported here: urllib.request pulls in http.client, email and ssl, a third of the
    # tool's start-up, and most runs never ask the topology service.
    import urllib.error
    import urllib.request

    url = identity_url(base_url, node)
    logger.debug("GET %s", url)
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as resp:
            body = _read_body(resp, url)
    except urllib.error.HTTPError as exc:
        try:
            with exc:
                body = _read_body(exc, url)
        except (OSError, ValueError, AttributeError):
            body = b""
        detail, revision = _error_body(body)
        if exc.code == 404:
            if not _is_topology_service(base_url, timeout):
                raise IdentityLookupError(
                    url,
                    f"404 ({detail}) and {TOPOLOGY_DOCUMENT_PATH} is not found either: "
                    "the URL does not point at a topology service",
                ) from None
            return TopologyAnswer(
                url=url, node=node, identity=None, revision=revision, detail=detail
            )
        raise IdentityLookupError(url, f"HTTP {exc.code}: {detail}") from None
    except urllib.error.URLError as exc:
        raise IdentityLookupError(url, f"cannot connect: {exc.reason}") from None
    except TimeoutError:
        raise IdentityLookupError(url, f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise IdentityLookupError(url, f"connection failed: {exc}") from None
    return parse_identity(url, node, body)
