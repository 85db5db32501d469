"""The C allocator told to give memory back: a reload must not ratchet the service's memory up.

A reload builds the new snapshot beside the one being served, then drops the old one. Its
large tables (a 20,000-name selector's set, the 800,000-node index of a big scenario
document) are megabytes each. glibc's malloc serves such blocks from ``mmap`` at first, but
raises that threshold each time one is freed, after which they come from the heap and,
freed, stay in the process; reloads are made on worker threads, each of which may get a
heap of its own. Measured on a 6.9 MiB scenario document (40 scenarios of 20,000 names),
that took the service from 246 MB to 600 MB after a few edits, with peaks at 725 MB.

So at start the threshold is fixed (large blocks always ``mmap``-ed, so freeing one returns
it), the heaps are limited to two, and after each reload the free heap memory is trimmed.
Elsewhere than on glibc these are no-ops.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Final

__all__ = ["give_back", "tune"]

logger = logging.getLogger(__name__)

_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
_MMAP_THRESHOLD: Final = 128 * 1024
_ARENAS: Final = 2


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - present on glibc only
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _libc()


def tune() -> bool:
    """Fix the mmap threshold and limit the heaps (once, at start); False where not glibc."""
    if _LIBC is None:
        return False
    ok = bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD))
    ok = bool(_LIBC.mallopt(_M_ARENA_MAX, _ARENAS)) and ok
    if not ok:
        logger.debug("mallopt refused a setting; memory is given back less promptly")
    return ok


def give_back() -> None:
    """Return the heaps' free memory to the system (after a reload dropped a snapshot)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
