"""Which clique this node's IMEX daemon belongs to: the node's fabric identity.

A real IMEX domain only spans nodes whose GPUs share an NVLink fabric (one cluster UUID and
clique id); the DRA driver only lists those in the node list, but a node that was rebound
since is shown as a node-map mismatch and is not part of the domain. The work-alike takes the
identity from, in order:

1. the topology service (``NVML_MOCK_TOPOLOGY_URL`` and ``NODE_NAME``), watched, so that a
   rebind moves the daemon to its new clique within one watch round trip;
2. the fabric identity the NRI plugin injected into the container
   (``MOCK_FABRIC_CLUSTER_UUID``, ``MOCK_FABRIC_CLIQUE_ID``), fixed for its life;
3. none: the daemon has no clique and matches every peer that has none (a plain IMEX test
   without fabric identity).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Final

from nvml_mock_protocol import identity, names

__all__ = ["ENV_TOPOLOGY_URL", "CliqueSource", "clique_of"]

logger = logging.getLogger(__name__)

ENV_TOPOLOGY_URL: Final = "NVML_MOCK_TOPOLOGY_URL"
_WAIT: Final = 20
_BACKOFF: Final = 1.0


def clique_of(cluster_uuid: str, clique_id: str | int) -> str:
    """One clique's name: ``<cluster uuid>.<clique id>``, as the DRA driver labels nodes."""
    return f"{cluster_uuid}.{clique_id}"


class CliqueSource:
    """The node's clique now; a topology watch keeps it current in a thread of its own."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._lock = threading.Lock()
        self._clique: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        url = environ.get(ENV_TOPOLOGY_URL, "").strip()
        node = environ.get(names.ENV_NODE_NAME, "").strip()
        uuid = environ.get(names.ENV_FABRIC_CLUSTER_UUID, "").strip()
        clique = environ.get(names.ENV_FABRIC_CLIQUE_ID, "").strip()
        if uuid and clique:
            self._clique = clique_of(uuid, clique)
        self.source = "env" if self._clique else "none"
        if url and node:
            self.source = f"topology service {url} (node {node})"
            self._url = url.rstrip("/") + names.TOPOLOGY_IDENTITY_PATH.format(
                node=urllib.parse.quote(node, safe="")
            )
            self._ready = threading.Event()
            self._thread = threading.Thread(target=self._watch, name="clique-watch", daemon=True)

    def start(self, first_wait: float = 2.0) -> None:
        """Start the watch, waiting up to *first_wait* seconds for the first answer."""
        if self._thread is not None:
            self._thread.start()
            self._ready.wait(first_wait)

    def stop(self) -> None:
        self._stop.set()

    @property
    def current(self) -> str | None:
        with self._lock:
            return self._clique

    def _set(self, clique: str | None) -> None:
        with self._lock:
            changed = clique != self._clique
            self._clique = clique
        if changed:
            logger.info("fabric identity: clique %s", clique or "none")

    def _watch(self) -> None:
        revision = -1
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not self._stop.is_set():
            query = (
                ""
                if revision < 0
                else (f"?{identity.REVISION_QUERY}={revision}&{identity.WAIT_QUERY}={_WAIT}")
            )
            try:
                with opener.open(self._url + query, timeout=_WAIT + 5) as reply:
                    body = json.loads(reply.read())
                revision = int(body["revision"])
                self._set(clique_of(str(body["clusterUuid"]), body["cliqueId"]))
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    revision = int(exc.headers.get(identity.REVISION_HEADER, "0") or 0)
                    self._set(None)
                else:
                    logger.warning("topology service: HTTP %d; keeping clique", exc.code)
                    self._stop.wait(_BACKOFF)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("topology service unreachable (%s); keeping clique", exc)
                self._stop.wait(_BACKOFF)
            finally:
                self._ready.set()


def from_environ() -> CliqueSource:
    """The clique source of this process's environment."""
    return CliqueSource(os.environ)
