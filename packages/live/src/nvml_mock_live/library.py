"""The mock library's live-layer primitives: the one ABI this package calls upward.

Readers and writers of the live layer must share one implementation of its sequence locks,
with real atomics on every CPU; that implementation is the C library's (the
``nvml_mock_live_*`` exports of ``libnvidia-ml.so.1``), which the engine package builds. This
package is on a lower floor than the engine, so it never imports it: it loads the library
from a path and checks the contract first. The contract is declared in ``keys.toml``
(``[abi]``: a version and the primitives' names, generated into :mod:`._layout`); a library
that exports another ``nvml_mock_live_abi_version()``, lacks a primitive or was built for
another layout is refused with the reason.

Where the library is: the caller says (the NRI plugin: the overlay's ``lib/``), or the
distribution that builds it registers a provider under the entry-point group
:data:`LIBRARY_ENTRY_POINTS` (the engine does: ``nvml_mock_engine.library:library_path``), so
this package finds it without importing anything above it.
"""

from __future__ import annotations

import ctypes

from nvml_mock_live import _layout as layout
from nvml_mock_live.errors import LiveLayerError
from nvml_mock_live.header import MASK_WORDS

# Light on purpose (no functools, pathlib or typing): ``nvml-mock-ctl xid`` loads the
# library through this module in a command that must start about as fast as Python itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Final

__all__ = [
    "ABI_PRIMITIVES",
    "ABI_VERSION",
    "LIBRARY_ENTRY_POINTS",
    "default_library",
    "load",
    "snapshot",
]

ABI_VERSION: Final = layout.LIVE_ABI_VERSION
"""The version of the primitives' ABI this package calls (``keys.toml`` ``[abi]``)."""
ABI_PRIMITIVES: Final = layout.LIVE_ABI_PRIMITIVES
LIBRARY_ENTRY_POINTS: Final = "nvml_mock_live.library"
"""Entry-point group of the providers of the library's path (a callable returning it)."""

_C_VOID, _C_SIZE, _C_UINT, _C_U64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_uint64
_SIGNATURES: Final[dict[str, tuple[list[type], type]]] = {
    "nvml_mock_live_write": (
        [
            _C_VOID,
            _C_SIZE,
            _C_UINT,
            _C_UINT,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(_C_U64),
            ctypes.POINTER(ctypes.c_ubyte),
        ],
        ctypes.c_int,
    ),
    "nvml_mock_live_snapshot": (
        [
            _C_VOID,
            _C_SIZE,
            _C_UINT,
            ctypes.POINTER(_C_U64),
            ctypes.POINTER(_C_U64),
            ctypes.POINTER(_C_U64),
        ],
        ctypes.c_int,
    ),
    "nvml_mock_live_retire": ([_C_VOID, _C_SIZE], ctypes.c_int),
    "nvml_mock_live_event": ([_C_VOID, _C_SIZE, _C_UINT, _C_U64, _C_U64], _C_U64),
    "nvml_mock_live_event_on": (
        [_C_VOID, _C_SIZE, _C_UINT, _C_UINT, _C_UINT, _C_U64, _C_U64],
        _C_U64,
    ),
    "nvml_mock_live_proc_write": (
        [_C_VOID, _C_SIZE, _C_UINT, ctypes.c_char_p, _C_SIZE],
        ctypes.c_int,
    ),
    "nvml_mock_live_proc_read": ([_C_VOID, _C_SIZE, _C_UINT, _C_VOID, _C_SIZE], ctypes.c_int),
    "nvml_mock_live_proc_put": ([_C_VOID, _C_SIZE, ctypes.c_char_p, _C_SIZE], ctypes.c_int),
    "nvml_mock_live_proc_remove": ([_C_VOID, _C_SIZE, ctypes.c_char_p, _C_SIZE], ctypes.c_int),
    "nvml_mock_live_mig_reset": ([_C_VOID, _C_SIZE, _C_UINT], ctypes.c_int),
    "nvml_mock_live_mig_devices": (
        [
            _C_VOID,
            _C_SIZE,
            _C_UINT,
            ctypes.c_char_p,
            ctypes.POINTER(_C_UINT),
            ctypes.POINTER(_C_UINT),
            ctypes.POINTER(_C_UINT),
            ctypes.c_char_p,
            _C_UINT,
        ],
        ctypes.c_int,
    ),
    "nvml_mock_live_layout_bytes": ([], ctypes.c_ulonglong),
}
if set(_SIGNATURES) != set(ABI_PRIMITIVES):  # pragma: no cover - a declaration/binding drift
    raise ImportError("nvml_mock_live.library binds other primitives than keys.toml [abi] names")


_LOADED: dict[str, ctypes.CDLL] = {}


def _load(path: str) -> ctypes.CDLL:
    loaded = _LOADED.get(path)
    if loaded is not None:
        return loaded
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise LiveLayerError(f"cannot load the mock library {path}: {exc}") from None
    try:
        version_of = lib.nvml_mock_live_abi_version
    except AttributeError:
        raise LiveLayerError(
            f"the library {path} exports no nvml_mock_live_abi_version: not a mock library "
            f"of live ABI {ABI_VERSION}"
        ) from None
    version_of.argtypes, version_of.restype = [], ctypes.c_uint
    version = int(version_of())
    if version != ABI_VERSION:
        raise LiveLayerError(
            f"the mock library {path} has live ABI {version}, this writer needs {ABI_VERSION}: "
            "install matching versions of nvml-mock-live and nvml-mock-engine"
        )
    for name, (argtypes, restype) in _SIGNATURES.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise LiveLayerError(
                f"the library {path} has no {name}: not a mock library of live ABI {ABI_VERSION}"
            ) from None
        function.argtypes = argtypes
        function.restype = restype
    if lib.nvml_mock_live_layout_bytes() != layout.LIVE_TOTAL_BYTES:
        raise LiveLayerError(
            f"the mock library {path} was built from another key declaration than this package "
            f"(live layout {lib.nvml_mock_live_layout_bytes()} bytes, expected "
            f"{layout.LIVE_TOTAL_BYTES}); rebuild it"
        )
    _LOADED[path] = lib
    return lib


def load(path: Path | str) -> ctypes.CDLL:
    """The mock library at *path*, its live ABI checked and its primitives bound (loaded once
    per path; no ``nvmlInit``). Raises :class:`LiveLayerError` with the reason when it is
    missing, of another ABI or of another layout."""
    return _load(str(path))


_DEFAULT: list[Path] = []


def default_library() -> Path:
    """The mock library an installed provider names (entry-point group
    :data:`LIBRARY_ENTRY_POINTS`; asked once per process). Raises :class:`LiveLayerError`
    when none is installed or the provider fails (its message says why, e.g. a library not
    built yet)."""
    if _DEFAULT:
        return _DEFAULT[0]
    from importlib import metadata  # the entry-point scan only where no path was given
    from pathlib import Path

    providers = sorted(metadata.entry_points(group=LIBRARY_ENTRY_POINTS), key=lambda e: e.name)
    for entry in providers:
        try:
            found = Path(entry.load()())
        except (OSError, ImportError, AttributeError) as exc:
            raise LiveLayerError(str(exc)) from None
        _DEFAULT.append(found)
        return found
    raise LiveLayerError(
        "no mock library given and no provider installed: pass the library's path "
        "(an overlay's lib/libnvidia-ml.so.1) or install nvml-mock-engine"
    )


def snapshot(
    lib: ctypes.CDLL, address: int, gpu: int
) -> tuple[int, ctypes.Array[ctypes.c_uint64], ctypes.Array[ctypes.c_uint64]]:
    """One consistent copy of GPU record *gpu* of the live file mapped at *address*, through
    the library's sequence lock: ``(rc, mask words, slots)``; rc is not 0 when no consistent
    copy could be taken (a writer died mid-write)."""
    mask = (ctypes.c_uint64 * MASK_WORDS)()
    slots = (ctypes.c_uint64 * layout.LIVE_KEY_SLOTS)()
    writes = ctypes.c_uint64()
    rc = lib.nvml_mock_live_snapshot(
        address, layout.LIVE_TOTAL_BYTES, gpu, mask, slots, ctypes.byref(writes)
    )
    return int(rc), mask, slots
