"""The topology document: which node belongs to which ComputeDomain and NVLink clique.

The document has the shape of the topology ConfigMap that NVIDIA
k8s-test-infra's nvml-mock Helm chart renders (``version: 1`` and the
``domains`` of its ``topology`` value); it is read by the topology service::

    version: 1
    domains:
      - name: demo-domain
        uuid: 00000000-0000-0000-0000-0000000000ab
        cliques:
          - id: 0
            nodes: [worker-1, worker-2]

That chart documents "each node in exactly one clique" but never checks it;
a node silently placed twice gets whichever identity a consumer happens to read
first. Here the whole document is validated before anyone sees it, and every
problem is reported at once with the place it sits (``domains[0] 'demo-domain'
.cliques[1] (id 7).nodes[2]``), so that whoever edits the ConfigMap can fix it
in one pass. :func:`parse_topology` is the entry point for text (YAML or JSON);
:meth:`TopologyDocument.node_index` is the per-node lookup every consumer needs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import reprlib
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from nvml_mock_protocol.errors import ProtocolPackageError

__all__ = [
    "CLIQUE_ID_MAX",
    "DESCRIBED_MAX_PROBLEMS",
    "DOCUMENT_MAX_BYTES",
    "DOCUMENT_MAX_DEPTH",
    "DOCUMENT_MAX_ITEMS",
    "NODE_NAME_MAX_LENGTH",
    "NODE_NAME_PATTERN",
    "REPORT_MAX_BYTES",
    "REPORT_MAX_PROBLEMS",
    "TOPOLOGY_VERSION",
    "Clique",
    "CliqueId",
    "ClusterUuid",
    "Domain",
    "NodeName",
    "NodePlacement",
    "TopologyDocument",
    "TopologyError",
    "check_node_name",
    "node_name_problem",
    "parse_topology",
    "read_topology_file",
    "validate_topology_data",
]

TOPOLOGY_VERSION: Literal[1] = 1
"""The only document version this build reads."""
CLIQUE_ID_MAX = 2**32 - 1
"""NVML reports the clique id as an unsigned 32-bit integer."""
NODE_NAME_MAX_LENGTH = 253
"""Kubernetes node names are DNS-1123 subdomains: at most 253 characters."""
DOCUMENT_MAX_BYTES = 8 * 1024 * 1024
"""Default cap on a document's size in bytes. A 15,000-node cluster written out with 253-character
node names is under 4 MiB; with ordinary names it is under 1 MiB."""
DOCUMENT_MAX_ITEMS = 1_000_000
"""Default cap on the values in a document (every mapping, list and scalar, keys included),
counted with YAML aliases expanded. A 15,000-node cluster in cliques of 8 is about 25,000; a
"billion laughs" document of a few hundred bytes expands to a billion and is refused before it
is built."""
DOCUMENT_MAX_DEPTH = 32
"""Deepest nesting a document may have. A topology document is 6 levels deep; the cap keeps a
document nested 100,000 deep from exhausting any recursive parser, validator or renderer."""
REPORT_MAX_PROBLEMS = 50
"""At most this many problems are written into a :class:`TopologyError`'s message."""
DESCRIBED_MAX_PROBLEMS = 1000
"""At most this many validation problems are described (placed and worded); the rest are
counted, so that a document with 100,000 bad names costs little more to refuse than to read."""
REPORT_MAX_BYTES = 16 * 1024
"""At most about this many bytes of problems are written into a :class:`TopologyError`'s message;
the rest is counted ("... and 99,950 more problems not shown")."""

_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
NODE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS-1123 subdomain as a regular expression (for schemas; the length limit is separate)."""
_SUBDOMAIN_RE = re.compile(NODE_NAME_PATTERN)

_SHOWN_INT_BITS = 128
"""Integers wider than this are described by their size: rendering a huge one in decimal is slow
(and refused by Python beyond 4,300 digits)."""


class _BoundedRepr(reprlib.Repr):
    """``repr`` that cuts while rendering, never after: its cost is bounded, not the value's."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxtuple = self.maxlist = self.maxset = self.maxfrozenset = self.maxdeque = 4
        self.maxdict = 3
        self.maxstring = limit
        self.maxlong = self.maxother = limit

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _SHOWN_INT_BITS:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHOWN: dict[int, _BoundedRepr] = {}


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, at a cost bounded by ``limit``.

    Every value from a document that reaches a message goes through here, so that a
    megabyte-long name, a 10,000-digit number or a deeply nested list shows as a few
    dozen characters and never takes longer to describe than to read.
    """
    kind = type(value)
    if (kind is str and len(value) <= limit) or (kind is int and value.bit_length() <= 128):
        return repr(value)  # the common case, bounded already
    renderer = _SHOWN.get(limit)
    if renderer is None:
        renderer = _SHOWN.setdefault(limit, _BoundedRepr(limit))
    if isinstance(value, str) and len(value) > limit:
        return f"{value[: limit - 8]!r}... ({len(value)} characters)"
    text = renderer.repr(value)
    return text if len(text) <= limit + 20 else text[:limit] + "..."


def node_name_problem(name: str) -> str | None:
    """Say why ``name`` is not a valid Kubernetes node name, or return None if it is.

    Node names are DNS-1123 subdomains as Kubernetes checks them: lowercase
    letters, digits, ``-`` and ``.``, at most 253 characters, each dot-separated
    label starting and ending with a letter or digit (Kubernetes does not limit
    a label to 63 characters here, so neither does this). The answer names the
    first offending character or label so that a 422 or a load error can be
    acted on without a spec at hand.
    """
    if _SUBDOMAIN_RE.fullmatch(name) and len(name) <= NODE_NAME_MAX_LENGTH:
        return None
    if not name:
        return "node name is empty"
    if len(name) > NODE_NAME_MAX_LENGTH:
        return f"node name is {len(name)} characters long; at most {NODE_NAME_MAX_LENGTH} allowed"
    for position, char in enumerate(name):
        if char.isascii() and char.isupper():
            return (
                f"node name has uppercase {char!r} at position {position}; "
                "node names are lowercase (DNS-1123)"
            )
        if not (char.isascii() and (char.isalnum() or char in "-.")):
            return (
                f"node name has {char!r} at position {position}; only lowercase letters, "
                "digits, '-' and '.' are allowed (DNS-1123)"
            )
    for label in name.split("."):
        if not label:
            return "node name has an empty label (leading, trailing or doubled '.')"
        if not (label[0].isalnum() and label[-1].isalnum()):
            return f"node name label {label!r} must start and end with a letter or digit (DNS-1123)"
    return "node name is not a DNS-1123 subdomain"  # pragma: no cover - the checks above are total


def check_node_name(name: str) -> str:
    """Return ``name`` if it is a valid node name, else raise ``ValueError`` saying why."""
    problem = node_name_problem(name)
    if problem is not None:
        raise ValueError(f"{problem}: {_shown(name, 80)}")
    return name


def _check_uuid(value: str) -> str:
    if not _UUID_RE.fullmatch(value):
        raise ValueError(
            f"{_shown(value)} is not a UUID; expected 32 hex digits as 8-4-4-4-12, "
            "e.g. 00000000-0000-0000-0000-0000000000ab"
        )
    return value.lower()


def _check_domain_name(value: str) -> str:
    if not value.strip():
        raise ValueError("domain name is empty")
    if any(not char.isprintable() for char in value):
        raise ValueError(f"domain name {_shown(value)} contains a control character")
    return value


NodeName = Annotated[StrictStr, AfterValidator(check_node_name)]
CliqueId = Annotated[StrictInt, Field(ge=0, le=CLIQUE_ID_MAX)]
ClusterUuid = Annotated[StrictStr, AfterValidator(_check_uuid)]
DomainName = Annotated[StrictStr, AfterValidator(_check_domain_name)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Clique(_Model):
    """One NVLink clique: a set of nodes whose GPUs share a fabric partition."""

    id: CliqueId
    """Clique id as NVML reports it (uint32)."""
    nodes: tuple[NodeName, ...] = ()
    """Names of the Kubernetes nodes in this clique."""


class Domain(_Model):
    """One ComputeDomain: a cluster UUID shared by all of its cliques."""

    name: DomainName
    """Human-readable domain name, injected as ``MOCK_FABRIC_DOMAIN``."""
    uuid: ClusterUuid
    """Cluster UUID (lowercased), reported by NVML as the GPU fabric's cluster UUID."""
    cliques: tuple[Clique, ...] = ()


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where one node sits in the topology: what a consumer needs to build its identity."""

    node: str
    domain: str
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class _Place:
    domain_position: int
    domain: str
    clique_position: int
    clique_id: int
    node_position: int

    def __str__(self) -> str:
        return (
            f"domains[{self.domain_position}] {_shown(self.domain)} "
            f"cliques[{self.clique_position}] (id {_shown(self.clique_id)}) "
            f"nodes[{self.node_position}]"
        )


_Outline = Sequence[tuple[Any, Any, Sequence[tuple[Any, Sequence[Any]]]]]
"""(name, uuid, [(clique id, [node, ...]), ...]) per domain: what the whole-document checks read."""


def _cross_problems(outline: _Outline) -> list[str]:
    """The checks that span entries: unique domain names and UUIDs, unique clique ids
    within a domain, each node in one clique. Works on raw data too (values of the
    wrong type are simply compared as they are), so that a document with field errors
    still gets these reported in the same pass."""
    problems: list[str] = []
    domain_by_name: dict[Any, int] = {}
    domain_by_uuid: dict[Any, int] = {}
    places: dict[Any, _Place] = {}
    for d_pos, (name, raw_uuid, cliques) in enumerate(outline):
        uuid = raw_uuid.lower() if isinstance(raw_uuid, str) else raw_uuid
        if name in domain_by_name:
            problems.append(
                f"domain name {_shown(name)} is used twice "
                f"(domains[{domain_by_name[name]}] and domains[{d_pos}])"
            )
        domain_by_name.setdefault(name, d_pos)
        if uuid in domain_by_uuid:
            shown = uuid if isinstance(uuid, str) and len(uuid) <= 60 else _shown(uuid)
            problems.append(
                f"cluster uuid {shown} is used by two domains "
                f"(domains[{domain_by_uuid[uuid]}] and domains[{d_pos}])"
            )
        domain_by_uuid.setdefault(uuid, d_pos)
        clique_by_id: dict[Any, int] = {}
        for c_pos, (clique_id, nodes) in enumerate(cliques):
            if clique_id in clique_by_id:
                problems.append(
                    f"domain {_shown(name)} has clique id {_shown(clique_id)} twice "
                    f"(cliques[{clique_by_id[clique_id]}] and cliques[{c_pos}])"
                )
            clique_by_id.setdefault(clique_id, c_pos)
            for n_pos, node in enumerate(nodes):
                place = _Place(d_pos, name, c_pos, clique_id, n_pos)
                earlier = places.setdefault(node, place)
                if earlier is place:
                    continue
                if (earlier.domain_position, earlier.clique_position) == (d_pos, c_pos):
                    problems.append(
                        f"node {_shown(node)} is listed twice in domains[{d_pos}] {_shown(name)} "
                        f"cliques[{c_pos}] (id {_shown(clique_id)}): "
                        f"nodes[{earlier.node_position}] "
                        f"and nodes[{n_pos}]"
                    )
                else:
                    problems.append(
                        f"node {_shown(node)} is in more than one clique: {earlier} and {place}; "
                        "each node belongs to exactly one clique"
                    )
    return problems


def _raw_outline(data: Mapping[Any, Any]) -> _Outline:
    """The outline of raw, possibly malformed data; entries of the wrong shape are skipped."""
    outline = []
    domains = data.get("domains")
    for domain in domains if isinstance(domains, list) else []:
        if not isinstance(domain, Mapping):
            continue
        cliques = []
        raw_cliques = domain.get("cliques")
        for clique in raw_cliques if isinstance(raw_cliques, list) else []:
            if not isinstance(clique, Mapping):
                continue
            nodes = clique.get("nodes")
            hashable = (
                [n for n in nodes if isinstance(n, str | int)] if isinstance(nodes, list) else []
            )
            clique_id = clique.get("id")
            cliques.append((clique_id if isinstance(clique_id, int | str) else None, hashable))
        name, uuid = domain.get("name"), domain.get("uuid")
        outline.append(
            (
                name if isinstance(name, str) else None,
                uuid if isinstance(uuid, str) else None,
                cliques,
            )
        )
    return outline


class TopologyDocument(_Model):
    """The whole topology document, validated as one.

    Beyond each field's own checks, the document as a whole must place every node
    in exactly one clique, and domain names and cluster UUIDs must be unique.
    """

    version: Literal[1]
    """Document format version; only 1 exists."""
    domains: tuple[Domain, ...] = ()

    _index: Mapping[str, NodePlacement] = PrivateAttr(default_factory=dict)

    @field_validator("version", mode="before")
    @classmethod
    def _known_version(cls, version: Any) -> Any:
        return _check_version("topology", version, TOPOLOGY_VERSION)

    @model_validator(mode="after")
    def _each_node_once(self) -> TopologyDocument:
        outline = [
            (domain.name, domain.uuid, [(clique.id, clique.nodes) for clique in domain.cliques])
            for domain in self.domains
        ]
        problems = _cross_problems(outline)
        if problems:
            raise ValueError("\n".join(problems))
        self._index = MappingProxyType(
            {
                node: NodePlacement(node, domain.name, domain.uuid, clique.id)
                for domain in self.domains
                for clique in domain.cliques
                for node in clique.nodes
            }
        )
        return self

    def node_index(self) -> Mapping[str, NodePlacement]:
        """Every node's placement, keyed by node name (read-only, built once at validation)."""
        return self._index

    def placement(self, node: str) -> NodePlacement | None:
        """The placement of ``node``, or None when it is in no clique."""
        return self._index.get(node)

    def to_data(self) -> dict[str, Any]:
        """The document as plain JSON-ready data (lists, dicts, str, int)."""
        return self.model_dump(mode="json")


class TopologyError(ProtocolPackageError, ValueError):
    """A topology document that cannot be used, with every problem found in it.

    ``problems`` holds one line per problem, each starting with where it is;
    ``str()`` joins them after the source (a file name, when known). The message is
    bounded whatever the document: at most :data:`REPORT_MAX_PROBLEMS` problems and
    about :data:`REPORT_MAX_BYTES` bytes are written, and the rest is counted, so a
    document with 100,000 bad names gives a readable report (and a ``/readyz`` body
    or a log line of kilobytes, not megabytes).
    """

    def __init__(
        self, problems: Sequence[str], source: str | None = None, *, undescribed: int = 0
    ) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        """The problems described, one line each (at most :data:`DESCRIBED_MAX_PROBLEMS`
        from validation; the loader stops describing after that)."""
        self.source = source
        self.count = len(self.problems) + undescribed
        """How many problems the document has, described or not."""
        message, self.omitted = _problem_report("topology", self.problems, source, self.count)
        """How many problems the message leaves out."""
        super().__init__(message)


def _problem_report(
    kind: str, problems: Sequence[str], source: str | None, count: int
) -> tuple[str, int]:
    """The bounded message of an invalid ``kind`` document, and how many problems it omits.

    At most :data:`REPORT_MAX_PROBLEMS` problems of at most 1,000 characters each and
    about :data:`REPORT_MAX_BYTES` bytes are written; ``count`` (all the problems the
    document has, described or not) is said in full. The topology and the scenario
    documents report alike.
    """
    where = f"invalid {kind} document {source}" if source else f"invalid {kind} document"
    shown: list[str] = []
    size = 0
    for problem in problems[:REPORT_MAX_PROBLEMS]:
        line = problem if len(problem) <= 1000 else problem[:1000] + "..."
        if shown and size + len(line) > REPORT_MAX_BYTES:
            break
        shown.append(f"  - {line}")
        size += len(line) + 5
    omitted = count - len(shown)
    if omitted:
        shown.append(f"  ... and {omitted} more problem(s) not shown")
    return f"{where}: {count} problem(s)\n" + "\n".join(shown), omitted


def _check_version(kind: str, version: Any, supported: int) -> Any:
    """``version`` when it is the one this build reads; a ValueError naming both otherwise."""
    if isinstance(version, bool) or version != supported:
        raise ValueError(
            f"unsupported {kind} document version {_shown(version)}; "
            f"this build reads version {supported}"
        )
    return version


_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_STR_TAG = "tag:yaml.org,2002:str"


def _implicit_by_first_character() -> dict[str | None, tuple[tuple[str, re.Pattern[str]], ...]]:
    resolvers: dict[str | None, list[tuple[str, re.Pattern[str]]]] = dict(
        _BaseLoader.yaml_implicit_resolvers
    )
    wildcard = tuple(resolvers.pop(None, ()))
    return {first: (*found, *wildcard) for first, found in resolvers.items()} | {None: wildcard}


class _StrictLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """Safe YAML loader that refuses duplicate mapping keys instead of keeping the last one.

    It also answers the two questions libyaml's composer asks once per scalar from Python
    (which tag a plain scalar has, how a string scalar is built) without PyYAML's general
    machinery: a 100,000-name selector spent more than half of its load there. The answers
    are the safe loader's own (its implicit resolvers, tried in its order), indexed once.
    """

    _implicit = _implicit_by_first_character()

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> Any:
        if kind is yaml.ScalarNode and implicit[0] and not self.yaml_path_resolvers:
            tried = self._implicit.get(value[:1])
            for tag, regexp in tried if tried is not None else self._implicit[None]:
                if regexp.match(value):
                    return tag
            return _STR_TAG
        return super().resolve(kind, value, implicit)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node.tag == _STR_TAG and type(node) is yaml.ScalarNode:
            return node.value  # what construct_yaml_str gives, without its dispatch
        return super().construct_object(node, deep=deep)


def _construct_mapping_without_duplicates(
    loader: yaml.SafeLoader, node: yaml.MappingNode
) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found a key that is a {type(key).__name__}; keys are scalars",
                key_node.start_mark,
            ) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {_shown(key)}",
                key_node.start_mark,
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_without_duplicates
)


def _describe(value: Any) -> str:
    return f"{_shown(value)} ({type(value).__name__})"


def _location(loc: tuple[int | str, ...], data: Any) -> str:
    """Render a pydantic error location against the raw data, naming domains and cliques."""
    parts: list[str] = []
    cursor: Any = data
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            cursor = cursor[item] if isinstance(cursor, list) and item < len(cursor) else None
            if isinstance(cursor, Mapping):
                if isinstance(cursor.get("name"), str) and "cliques" in cursor:
                    parts.append(f" {_shown(cursor['name'])}")
                elif isinstance(cursor.get("id"), int) and "nodes" in cursor:
                    parts.append(f" (id {_shown(cursor['id'])})")
        else:
            if parts:
                parts.append(".")
            parts.append(item if len(item) <= 60 else _shown(item))
            cursor = cursor.get(item) if isinstance(cursor, Mapping) else None
    return "".join(parts) or "document"


_BOUND_WORDS = {
    "greater_than_equal": ("ge", "below the minimum"),
    "less_than_equal": ("le", "above the maximum"),
    "greater_than": ("gt", "not above"),
    "less_than": ("lt", "not below"),
}
"""pydantic's bound errors: the constraint in their context, and how a refusal says it."""


def _bound_problem(item: Mapping[str, Any]) -> str:
    """A bound's refusal from the constraint that refused it (each field has its own range).

    Clique ids keep their range and reason, which is NVML's unsigned 32-bit clique id.
    """
    loc = tuple(item["loc"])
    value = _describe(item["input"])
    clique = bool(loc) and (loc[-1] == "id" or (len(loc) > 1 and loc[-2] == "cliques"))
    if clique:
        return f"{value} is outside 0..{CLIQUE_ID_MAX} (clique ids are unsigned 32-bit)"
    key, words = _BOUND_WORDS[item["type"]]
    bound = (item.get("ctx") or {}).get(key, "?")
    return f"{value} is {words} {bound}"


def _problems(errors: Sequence[Any], data: Any) -> list[str]:
    problems = []
    for item in errors[:DESCRIBED_MAX_PROBLEMS]:
        where = _location(tuple(item["loc"]), data)
        kind = item["type"]
        if kind in ("value_error", "assertion_error"):
            message = str(item["ctx"]["error"]) if "ctx" in item else item["msg"]
            problems += [f"{where}: {line}" for line in message.splitlines()[:-1]]
            message = message.splitlines()[-1] if message else message
        elif kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "missing":
            message = "required key is missing"
        elif kind in _BOUND_WORDS:
            message = _bound_problem(item)
        elif kind.endswith("_type"):
            message = f"{item['msg'].lower()}, got {_describe(item['input'])}"
            if kind == "string_type" and not isinstance(item["input"], Mapping | list):
                message += "; quote it in YAML"
        else:
            message = f"{item['msg']}, got {_describe(item['input'])}"
        problems.append(f"{where}: {message}")
    return problems


def validate_topology_data(data: Any, source: str | None = None) -> TopologyDocument:
    """Validate already-parsed data (a dict) as a topology document.

    Raises :class:`TopologyError` listing every problem.
    """
    if not isinstance(data, Mapping):
        raise TopologyError(
            [f"document: expected a mapping with 'version' and 'domains', got {_describe(data)}"],
            source,
        )
    try:
        return TopologyDocument.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # Describing a problem (its place, its value) costs far more than finding it; past
        # the first thousand, which is more than anyone reads, they are only counted.
        problems = _problems(errors, data)
        undescribed = max(0, len(errors) - DESCRIBED_MAX_PROBLEMS)
        if not any(item["loc"] == () for item in errors):
            # Field errors stop pydantic before the whole-document checks; run them on the
            # raw data so one pass reports everything.
            problems += [f"document: {p}" for p in _cross_problems(_raw_outline(data))]
        raise TopologyError(problems, source, undescribed=undescribed) from None


def parse_topology(
    text: str | bytes,
    source: str | None = None,
    *,
    max_bytes: int = DOCUMENT_MAX_BYTES,
    max_items: int = DOCUMENT_MAX_ITEMS,
) -> TopologyDocument:
    """Parse and validate a topology document from YAML or JSON text.

    JSON is tried first when the text starts with ``{`` (it is much faster for large
    documents); everything else is read as YAML with duplicate keys refused.

    What is accepted is bounded before anything is built from it: at most
    ``max_bytes`` bytes (characters, for ``str``), at most ``max_items`` values with
    YAML aliases expanded, no alias that refers to itself, and at most
    :data:`DOCUMENT_MAX_DEPTH` levels of nesting. Raises :class:`TopologyError` naming
    the source (when given) and every problem, and nothing else, whatever the text.
    """
    if len(text) > max_bytes:
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise TopologyError(
            [f"document is {len(text)} {unit}, larger than the limit of {max_bytes} bytes"], source
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TopologyError([f"document is not UTF-8: {exc}"], source) from None
    stripped = text.lstrip()
    data: Any
    if stripped.startswith("{"):
        data = _load_json(stripped, source)
        problem = _data_shape_problem(data, max_items)
    else:
        data, problem = _load_yaml(text, source, max_items)
    if problem is not None:
        raise TopologyError([problem], source)
    if data is None:
        raise TopologyError(["document is empty; expected 'version: 1' and 'domains'"], source)
    try:
        return validate_topology_data(data, source)
    except RecursionError:  # pragma: no cover - the depth cap is far below the recursion limit
        raise TopologyError([_too_deep()], source) from None


def _too_deep() -> str:
    return f"document is nested deeper than {DOCUMENT_MAX_DEPTH} levels (a topology document has 6)"


def _too_many(max_items: int) -> str:
    return (
        f"document has more than {max_items} values (mappings, lists and scalars, "
        "YAML aliases expanded), the limit"
    )


def _load_json(text: str, source: str | None) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_object_without_duplicates)
    except json.JSONDecodeError as exc:
        raise TopologyError(
            [f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"], source
        ) from None
    except _DuplicateKeyError as exc:
        raise TopologyError([str(exc)], source) from None
    except RecursionError:
        raise TopologyError([_too_deep()], source) from None
    except ValueError as exc:  # an integer literal too long to convert, and the like
        raise TopologyError([f"not valid JSON: {_scalar_message(exc)}"], source) from None


def _load_yaml(text: str, source: str | None, max_items: int) -> tuple[Any, str | None]:
    """Compose the YAML node graph, check its expanded shape, and only then build it."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        problem = _node_shape_problem(root, max_items)
        if problem is not None:
            return None, problem
        return loader.construct_document(root), None
    except yaml.YAMLError as exc:
        raise TopologyError([f"not valid YAML: {_yaml_message(exc)}"], source) from None
    except RecursionError:  # the pure-Python composer, on a document nested thousands deep
        raise TopologyError([_too_deep()], source) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar its constructor refuses
        raise TopologyError([f"not valid YAML: {_scalar_message(exc)}"], source) from None
    finally:
        loader.dispose()


def _node_shape_problem(root: yaml.Node, max_items: int) -> str | None:
    """What is wrong with a composed YAML graph's shape, or None; iterative and linear.

    Aliases make the graph a DAG whose expansion can be exponential in its size, so
    sizes and heights are computed once per node (memoised) and never by expanding.
    An alias to a node being expanded (an ancestor) is a recursive document.
    """
    done: dict[int, tuple[int, int]] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        key = id(node)
        if children is not None:  # every child is done: this node's turn
            active.discard(key)
            size = 1
            height = 0
            for child in children:
                child_size, child_height = done[id(child)]
                size += child_size
                height = max(height, child_height)
            if size > max_items:
                return _too_many(max_items)
            if height >= DOCUMENT_MAX_DEPTH:
                return _too_deep()
            done[key] = (size, height + 1)
            continue
        if key in done:
            continue
        if isinstance(node, yaml.ScalarNode):
            done[key] = (1, 1)
            continue
        if key in active:
            mark = node.start_mark
            where = f" (line {mark.line + 1})" if mark is not None else ""
            return f"document has an alias that refers to itself{where}; it would never end"
        if isinstance(node, yaml.SequenceNode) and all(
            type(child) is yaml.ScalarNode for child in node.value
        ):  # a list of names, say: no child needs a visit of its own
            size, height = 1 + len(node.value), 1 if node.value else 0
            if size > max_items:
                return _too_many(max_items)
            if height >= DOCUMENT_MAX_DEPTH:
                return _too_deep()
            done[key] = (size, height + 1)
            continue
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = list(node.value)
        stack.append((node, children))
        stack.extend((child, None) for child in children)
    return None


def _data_shape_problem(data: Any, max_items: int) -> str | None:
    """What is wrong with parsed JSON's shape (too many values, too deep), or None.

    Scalars inside a list or mapping are counted, not visited one by one: a list of
    100,000 names is one pass in C, where a visit each was a fifth of a reload."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    containers = (dict, list)
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > max_items:
            return _too_many(max_items)
        if depth > DOCUMENT_MAX_DEPTH:
            return _too_deep()
        if isinstance(value, dict):
            inner = [item for item in value.values() if isinstance(item, containers)]
            count += 2 * len(value) - len(inner)  # keys of parsed JSON are strings
        elif isinstance(value, list):
            inner = [item for item in value if isinstance(item, containers)]
            count += len(value) - len(inner)
        else:
            continue
        if count > max_items:
            return _too_many(max_items)
        if value and depth + 1 > DOCUMENT_MAX_DEPTH:
            return _too_deep()
        stack.extend((item, depth + 1) for item in inner)
    return None


def _scalar_message(exc: Exception) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return _cut(text)


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_topology_file(
    path: str | Path,
    *,
    max_bytes: int = DOCUMENT_MAX_BYTES,
    max_items: int = DOCUMENT_MAX_ITEMS,
) -> TopologyDocument:
    """Read, parse and validate the topology document at ``path``.

    The file is opened without blocking and must be a regular file: a FIFO, a device
    (``/dev/zero``), a socket is refused at once, without being read, and a regular
    file larger than ``max_bytes`` is refused without being read whole.

    Raises :class:`TopologyError` for content problems (a special file, too large,
    invalid) and ``OSError`` when the file cannot be opened (missing, a directory, no
    permission, a symlink loop) so callers can tell the two apart.
    """
    raw = _read_bounded(Path(path), max_bytes, "topology file")
    return parse_topology(raw, str(path), max_bytes=max_bytes, max_items=max_items)


def _read_bounded(path: Path, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, read without blocking.

    Raises :class:`TopologyError` for a special file or one over the limit (``what`` names
    the file's role in the message) and ``OSError`` when it cannot be opened.
    """
    path = Path(path)
    source = str(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), source)
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
            raise TopologyError(
                [f"{what} is {kind}, not a regular file; refused without reading it"],
                source,
            )
        if info.st_size > max_bytes:
            raise TopologyError(
                [f"document is {info.st_size} bytes, larger than the limit of {max_bytes} bytes"],
                source,
            )
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # the file may grow between fstat and read
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise TopologyError([f"document is larger than the limit of {max_bytes} bytes"], source)
    finally:
        os.close(fd)
    return b"".join(chunks)


class _DuplicateKeyError(ValueError):
    pass


def _json_object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(f"not valid JSON: duplicate key {_shown(key)} in one object")
        result[key] = value
    return result


def _yaml_message(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        return f"{where}{exc.problem or exc.context or 'malformed'}"
    return str(exc)
