"""A small Kubernetes API client: kubeconfig, JSON requests, server-side apply.

The generator talks to an API server through a handful of verbs (apply, get, list, patch,
delete), so it carries no client library: the standard library's ``http.client`` over one
keep-alive connection per thread. Server-side apply with one field manager makes a re-run
converge on the same objects instead of duplicating them.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import yaml

from nvml_mock_kwok.errors import KwokError, PlanError

__all__ = ["FIELD_MANAGER", "ApiError", "Kube", "load_kubeconfig"]

FIELD_MANAGER: Final = "nvml-mock-kwok"


class ApiError(KwokError):
    """The API server answered with an error status."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to authenticate, from a kubeconfig."""

    server: str
    token: str | None
    ca_file: str | None
    insecure: bool
    cert_file: str | None
    key_file: str | None


def _data_file(data: str, suffix: str) -> str:
    with tempfile.NamedTemporaryFile(
        prefix="nvml-mock-kwok-", suffix=suffix, delete=False
    ) as handle:
        handle.write(base64.b64decode(data))
    return handle.name


def load_kubeconfig(path: Path, context: str | None = None) -> Credentials:
    """Read the cluster and user of ``context`` (the current one by default) from ``path``."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise PlanError(f"kubeconfig {path} is not a mapping")
    name = context or config.get("current-context")

    def named(kind: str, wanted: object) -> dict[str, Any]:
        for item in config.get(kind) or ():
            if isinstance(item, dict) and item.get("name") == wanted:
                return dict(item.get(kind[:-1]) or {})
        raise PlanError(f"kubeconfig {path} has no {kind[:-1]} named {wanted!r}")

    ctx = named("contexts", name)
    cluster = named("clusters", ctx.get("cluster"))
    user = named("users", ctx.get("user")) if ctx.get("user") else {}
    base = path.parent

    def file_of(key: str, suffix: str, source: Mapping[str, Any]) -> str | None:
        if source.get(f"{key}-data"):
            return _data_file(str(source[f"{key}-data"]), suffix)
        if source.get(key):
            return str(base / str(source[key]))
        return None

    return Credentials(
        server=str(cluster.get("server", "")).rstrip("/"),
        token=str(user["token"]) if user.get("token") else None,
        ca_file=file_of("certificate-authority", ".crt", cluster),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_file=file_of("client-certificate", ".crt", user),
        key_file=file_of("client-key", ".key", user),
    )


class Kube:
    """JSON requests to one API server; safe to share between threads."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        url = urlsplit(credentials.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise KwokError(f"API server URL {credentials.server!r} is not http(s)://host:port")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection] = []
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            context = ssl.create_default_context(cafile=credentials.ca_file)
            if credentials.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if credentials.cert_file and credentials.key_file:
                context.load_cert_chain(credentials.cert_file, credentials.key_file)
            self._ssl = context

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
            with self._lock:
                self._open.append(conn)
        return conn

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()
        self._local = threading.local()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        ok_missing: bool = False,
        accept: str = "application/json",
    ) -> Any:
        """One request; the decoded JSON reply (None for a 404 when ``ok_missing``)."""
        return self.exchange(
            method,
            path,
            body,
            content_type=content_type,
            query=query,
            ok_missing=ok_missing,
            accept=accept,
        )[1]

    def exchange(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        ok_missing: bool = False,
        ok_conflict: bool = False,
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        """One request; its HTTP status and decoded JSON reply. A 404 (``ok_missing``) or a
        409 (``ok_conflict``) is returned, not raised: the caller decides what it means."""
        target = path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": accept, "Content-Type": content_type}
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, target, body=payload, headers=headers)
                reply = conn.getresponse()
                raw = reply.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if attempt:
                    raise KwokError(f"{method} {path}: {exc}") from exc
        if (reply.status == 404 and ok_missing) or (reply.status == 409 and ok_conflict):
            return reply.status, None
        if reply.status >= 400:
            try:
                message = json.loads(raw).get("message", raw.decode(errors="replace"))
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace")[:300]
            raise ApiError(reply.status, method, path, str(message))
        return reply.status, json.loads(raw) if raw else None

    def create(self, collection: str, obj: Mapping[str, Any]) -> Any:
        """POST ``obj`` into ``collection``; the made object, or None when one of that name
        exists (409): the cheapest first write, with the caller converging on a conflict."""
        status, made = self.exchange(
            "POST", collection, obj, query={"fieldManager": FIELD_MANAGER}, ok_conflict=True
        )
        return None if status == 409 else made

    def apply_new(self, path: str, obj: Mapping[str, Any]) -> tuple[bool, Any]:
        """Server-side apply of ``obj``; whether the server made it (201) and the object.

        A Node made by an apply keeps the status it was sent with (an existing one does
        not: its status is only written through the ``status`` subresource)."""
        status, made = self.exchange(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        return status == 201, made

    def apply(self, path: str, obj: Mapping[str, Any], *, subresource: str = "") -> Any:
        """Server-side apply of ``obj`` at ``path`` (the object's own URL), forcing ownership."""
        suffix = f"/{subresource}" if subresource else ""
        return self.request(
            "PATCH",
            path + suffix,
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    def patch(self, path: str, patch: Any, *, kind: str = "merge", subresource: str = "") -> Any:
        """A JSON merge patch (``merge``), strategic merge (``strategic``) or JSON patch."""
        types = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }
        suffix = f"/{subresource}" if subresource else ""
        return self.request(
            "PATCH",
            path + suffix,
            patch,
            content_type=types[kind],
            query={"fieldManager": FIELD_MANAGER},
        )

    def list(self, path: str, *, selector: str | None = None, field: str | None = None) -> Any:
        """Every item of a collection, page by page."""
        items: list[Any] = []
        token = ""
        while True:
            query = {"limit": "500"}
            if selector:
                query["labelSelector"] = selector
            if field:
                query["fieldSelector"] = field
            if token:
                query["continue"] = token
            page = self.request("GET", path, query=query)
            items.extend(page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items


def object_path(obj: Mapping[str, Any]) -> str:
    """The URL of a (cluster-scoped or namespaced) object of the kinds this package makes."""
    kind, name = obj["kind"], quote(obj["metadata"]["name"], safe="")
    version = obj["apiVersion"]
    group_path = "/api/v1" if version == "v1" else f"/apis/{version}"
    plural = {
        "Node": "nodes",
        "ResourceSlice": "resourceslices",
        "Stage": "stages",
        "DeviceClass": "deviceclasses",
        "ConfigMap": "configmaps",
    }[kind]
    namespace = obj["metadata"].get("namespace")
    if namespace:
        return f"{group_path}/namespaces/{namespace}/{plural}/{name}"
    return f"{group_path}/{plural}/{name}"
