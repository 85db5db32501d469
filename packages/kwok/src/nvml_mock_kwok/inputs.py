"""Checks of what the command line gives, before anything is made or sent.

The API server would refuse most of these values too, but only after the first objects of
a fleet were written: a bad ``--memory`` then leaves a partial fleet behind. So every value
that ends up in an object is checked here, and a refusal names the flag and the value
(exit 3), before the first request.
"""

from __future__ import annotations

import math
import re
from typing import Final

from nvml_mock_kwok.errors import PlanError

__all__ = [
    "MAX_NODES",
    "MAX_NODE_NAME",
    "MAX_SLICES_AFTER_READY",
    "MAX_WORKERS",
    "check_label_value",
    "check_node_count",
    "check_node_name",
    "check_pods",
    "check_quantity",
    "check_seconds",
    "check_workers",
]

MAX_NODES: Final = 100_000
"""The most nodes one fleet (or ``plan``) may have: twenty times the 5,000 measured, and a
document of that many names is still a few megabytes."""
MAX_WORKERS: Final = 256
MAX_NODE_NAME: Final = 63
"""A node's name is also its ``kubernetes.io/hostname`` label value: 63 characters."""
MAX_SLICES_AFTER_READY: Final = 86_400.0

# Kubernetes' resource.Quantity: a decimal number, then a binary suffix (Ki..Ei), a decimal
# suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent.
_QUANTITY: Final = re.compile(
    r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z"
)
_LABEL_VALUE: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_NODE_NAME: Final = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\Z")


def _bad(flag: str, value: object, why: str) -> PlanError:
    return PlanError(f"{flag} {value!r}: {why}")


def check_quantity(flag: str, value: str) -> str:
    """A Kubernetes quantity above zero (``64``, ``500m``, ``512Gi``)."""
    if not _QUANTITY.match(value):
        raise _bad(
            flag,
            value,
            "not a Kubernetes quantity (a number, then Ki/Mi/Gi/Ti/Pi/Ei, n/u/m/k/M/G/T/P/E or "
            "an exponent)",
        )
    mantissa = re.split(r"[eE]", value, maxsplit=1)[0]
    if not re.search(r"[1-9]", mantissa):
        raise _bad(flag, value, "must be more than 0")
    return value


def check_pods(value: str) -> str:
    """A pod capacity: a whole number, written as one (the kubelet's ``--max-pods``)."""
    if not re.fullmatch(r"[0-9]{1,7}", value) or int(value) < 1:
        raise _bad("--pods", value, "must be a whole number of pods from 1 to 9999999")
    return value


def check_label_value(flag: str, value: str) -> str:
    """A label value that is not empty (``kubernetes.io/arch``)."""
    if not _LABEL_VALUE.match(value):
        raise _bad(
            flag,
            value,
            "not a label value (1-63 letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit)",
        )
    return value


def check_node_name(flag: str, name: str) -> str:
    """A node name (a DNS subdomain) short enough to be its hostname label's value."""
    if len(name) > MAX_NODE_NAME:
        raise _bad(
            flag,
            name[:80] + ("…" if len(name) > 80 else ""),
            f"a node name of {len(name)} characters; at most {MAX_NODE_NAME} (it is the "
            "node's kubernetes.io/hostname label)",
        )
    if not _NODE_NAME.match(name):
        raise _bad(
            flag,
            name,
            "a node name is lower-case letters, digits, '-' and '.', starting and ending "
            "with a letter or digit",
        )
    return name


def check_node_count(flag: str, count: int) -> int:
    """At least 1, at most :data:`MAX_NODES`."""
    if not 1 <= count <= MAX_NODES:
        raise _bad(flag, count, f"must be from 1 to {MAX_NODES:,} nodes")
    return count


def check_workers(count: int) -> int:
    """Parallel requests: 1 to :data:`MAX_WORKERS`."""
    if not 1 <= count <= MAX_WORKERS:
        raise _bad("--workers", count, f"must be from 1 to {MAX_WORKERS}")
    return count


def check_seconds(flag: str, value: float) -> float:
    """A finite number of seconds from 0 to a day."""
    if not (math.isfinite(value) and 0 <= value <= MAX_SLICES_AFTER_READY):
        raise _bad(flag, value, f"must be from 0 to {MAX_SLICES_AFTER_READY:g} seconds")
    return value
