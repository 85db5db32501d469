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

from nvml_mock_live import _layout as layout
from nvml_mock_live.errors import LiveLayerError
from nvml_mock_live.header import MASK_WORDS

# Light on purpose (no ctypes, functools, pathlib or typing at import): ``nvml-mock-ctl xid``
# loads the library through this module in a command that must start about as fast as Python
# itself, and binds its one primitive without the ctypes package (:func:`event_sender`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    import mmap
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, Final

__all__ = [
    "ABI_PRIMITIVES",
    "ABI_VERSION",
    "LIBRARY_ENTRY_POINTS",
    "EventSender",
    "default_library",
    "event_sender",
    "load",
    "snapshot",
]

ABI_VERSION: Final = layout.LIVE_ABI_VERSION
"""The version of the primitives' ABI this package calls (``keys.toml`` ``[abi]``)."""
ABI_PRIMITIVES: Final = layout.LIVE_ABI_PRIMITIVES
LIBRARY_ENTRY_POINTS: Final = "nvml_mock_live.library"
"""Entry-point group of the providers of the library's path (a callable returning it)."""

_SIGNATURES: list[dict[str, tuple[list[type], type]]] = []


def _signatures() -> dict[str, tuple[list[type], type]]:
    """Every primitive's ctypes signature (``argtypes``, ``restype``), built on the first full
    load, not at import: ``nvml-mock-ctl xid`` binds one primitive and never needs them."""
    if _SIGNATURES:
        return _SIGNATURES[0]
    import ctypes

    void, size, uint, u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_uint64
    signatures: dict[str, tuple[list[type], type]] = {
        "nvml_mock_live_write": (
            [
                void,
                size,
                uint,
                uint,
                ctypes.POINTER(ctypes.c_uint),
                ctypes.POINTER(u64),
                ctypes.POINTER(ctypes.c_ubyte),
            ],
            ctypes.c_int,
        ),
        "nvml_mock_live_snapshot": (
            [
                void,
                size,
                uint,
                ctypes.POINTER(u64),
                ctypes.POINTER(u64),
                ctypes.POINTER(u64),
            ],
            ctypes.c_int,
        ),
        "nvml_mock_live_retire": ([void, size], ctypes.c_int),
        "nvml_mock_live_event": ([void, size, uint, u64, u64], u64),
        "nvml_mock_live_event_on": (
            [void, size, uint, uint, uint, u64, u64],
            u64,
        ),
        "nvml_mock_live_proc_write": (
            [void, size, uint, ctypes.c_char_p, size],
            ctypes.c_int,
        ),
        "nvml_mock_live_proc_read": ([void, size, uint, void, size], ctypes.c_int),
        "nvml_mock_live_proc_put": ([void, size, ctypes.c_char_p, size], ctypes.c_int),
        "nvml_mock_live_proc_remove": ([void, size, ctypes.c_char_p, size], ctypes.c_int),
        "nvml_mock_live_mig_reset": ([void, size, uint], ctypes.c_int),
        "nvml_mock_live_mig_devices": (
            [
                void,
                size,
                uint,
                ctypes.c_char_p,
                ctypes.POINTER(uint),
                ctypes.POINTER(uint),
                ctypes.POINTER(uint),
                ctypes.c_char_p,
                uint,
            ],
            ctypes.c_int,
        ),
        "nvml_mock_live_layout_bytes": ([], ctypes.c_ulonglong),
    }
    if set(signatures) != set(ABI_PRIMITIVES):  # pragma: no cover - a declaration/binding drift
        raise LiveLayerError(
            "nvml_mock_live.library binds other primitives than keys.toml [abi] names"
        )
    _SIGNATURES.append(signatures)
    return signatures


_LOADED: dict[str, ctypes.CDLL] = {}


def _check(
    path: str,
    version: int | None,
    exports: Callable[[str], bool],
    layout_bytes: Callable[[], int],
) -> None:
    """Refuse the library at *path* unless it speaks this package's live ABI: its
    ``nvml_mock_live_abi_version()`` (*version*, None when not exported), every primitive
    exported, and the layout it was built for. One set of rules and messages for
    :func:`load` and :func:`event_sender`."""
    if version is None:
        raise LiveLayerError(
            f"the library {path} exports no nvml_mock_live_abi_version: not a mock library "
            f"of live ABI {ABI_VERSION}"
        )
    if version != ABI_VERSION:
        raise LiveLayerError(
            f"the mock library {path} has live ABI {version}, this writer needs {ABI_VERSION}: "
            "install matching versions of nvml-mock-live and nvml-mock-engine"
        )
    for name in ABI_PRIMITIVES:
        if not exports(name):
            raise LiveLayerError(
                f"the library {path} has no {name}: not a mock library of live ABI {ABI_VERSION}"
            )
    built_for = layout_bytes()
    if built_for != layout.LIVE_TOTAL_BYTES:
        raise LiveLayerError(
            f"the mock library {path} was built from another key declaration than this package "
            f"(live layout {built_for} bytes, expected {layout.LIVE_TOTAL_BYTES}); rebuild it"
        )


def _load(path: str) -> ctypes.CDLL:
    loaded = _LOADED.get(path)
    if loaded is not None:
        return loaded
    import ctypes

    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise LiveLayerError(f"cannot load the mock library {path}: {exc}") from None
    version: int | None = None
    if hasattr(lib, "nvml_mock_live_abi_version"):
        version_of = lib.nvml_mock_live_abi_version
        version_of.argtypes, version_of.restype = [], ctypes.c_uint
        version = int(version_of())
    signatures = _signatures()

    def exports(name: str) -> bool:
        if not hasattr(lib, name):
            return False
        function = getattr(lib, name)
        function.argtypes, function.restype = signatures[name]
        return True

    _check(path, version, exports, lambda: int(lib.nvml_mock_live_layout_bytes()))
    _LOADED[path] = lib
    return lib


def load(path: Path | str) -> ctypes.CDLL:
    """The mock library at *path*, its live ABI checked and its primitives bound (loaded once
    per path; no ``nvmlInit``). Raises :class:`LiveLayerError` with the reason when it is
    missing, of another ABI or of another layout."""
    return _load(str(path))


class EventSender:
    """``nvml_mock_live_event_on`` of one mock library, bound (:func:`event_sender`)."""

    __slots__ = ("_addressof", "_function", "_word")

    def __init__(
        self, function: Callable[..., int], word: Any, addressof: Callable[[Any], int]
    ) -> None:
        self._function = function
        self._word = word  # a C type whose from_buffer gives the mapping's address
        self._addressof = addressof

    def send(
        self,
        mapped: mmap.mmap,
        gpu: int,
        event_type: int,
        data: int,
        *,
        gpu_instance: int,
        compute_instance: int,
    ) -> int:
        """Append the event to the live file *mapped* (writable) and wake its waiters, as
        :meth:`nvml_mock_live.LiveLayer.event` does: its sequence number, 0 when the library
        refused it."""
        anchor = self._word.from_buffer(mapped)  # the mapping is exported for the call only
        try:
            seq = self._function(
                self._addressof(anchor),
                layout.LIVE_TOTAL_BYTES,
                gpu,
                gpu_instance,
                compute_instance,
                event_type,
                data,
            )
        finally:
            del anchor
        return int(seq)


def event_sender(path: Path | str) -> EventSender:
    """``nvml_mock_live_event_on`` of the mock library at *path*, its live ABI checked as
    :func:`load` checks it (the same refusals and messages). The primitive appends an event
    and wakes the processes waiting in ``nvmlEventSetWait`` (a futex only C can wake).

    For a command that sends one event and exits (``nvml-mock-ctl xid``): importing the
    ``ctypes`` package costs about 2 ms (the package, ``types``, ``ctypes._endian`` and every
    type it declares), as much as the rest of the command, so this binds the one primitive
    through ``_ctypes``, the C core ``ctypes`` is a layer over, as ``ctypes.CFUNCTYPE`` does.
    Where that core lacks these names (another interpreter), the primitive comes from
    :func:`load`: the same call, slower to start, and the engine's start-up test of
    ``nvml-mock-ctl xid`` (it loads no ``ctypes``) fails, so the slower start is never silent.
    """
    text = str(path)
    bound = _event_on_from_core(text)
    if bound is None:  # pragma: no cover - not CPython's ctypes core
        bound = _event_on_from_ctypes(text)
    return EventSender(*bound)


def _event_on_from_ctypes(path: str) -> tuple[Callable[..., int], Any, Callable[[Any], int]]:
    """``nvml_mock_live_event_on`` as :func:`load` binds it, with ctypes' 64-bit word type and
    ``addressof``."""
    import ctypes

    return load(path).nvml_mock_live_event_on, ctypes.c_uint64, ctypes.addressof


def _event_on_from_core(path: str) -> tuple[Callable[..., int], Any, Callable[[Any], int]] | None:
    """``nvml_mock_live_event_on`` bound through ``_ctypes`` alone (None where it lacks the
    names ``ctypes`` itself imports from it): the C types as ``ctypes`` declares them (a
    direct subclass of ``_SimpleCData`` per type code, so results come back as ``int``), the
    library opened as ``ctypes.CDLL`` opens it, each function a ``CFuncPtr`` subclass as
    ``ctypes.CFUNCTYPE`` makes it."""
    try:
        from _ctypes import (
            FUNCFLAG_CDECL,
            RTLD_LOCAL,
            CFuncPtr,
            _SimpleCData,
            addressof,
            dlopen,
            dlsym,
            sizeof,
        )
    except ImportError:  # pragma: no cover - not CPython's ctypes core
        return None
    types = _core_types(_SimpleCData, sizeof)
    uint, u64, pointer, size = (
        types["c_uint"],
        types["c_uint64"],
        types["c_void_p"],
        types["c_size_t"],
    )

    def prototype(restype: type, *argtypes: type) -> type:
        return type(
            "CFunctionType",
            (CFuncPtr,),
            {"_flags_": FUNCFLAG_CDECL, "_restype_": restype, "_argtypes_": argtypes},
        )

    try:
        handle = dlopen(path, RTLD_LOCAL)
    except OSError as exc:
        raise LiveLayerError(f"cannot load the mock library {path}: {exc}") from None

    def address(name: str) -> int | None:
        try:
            found: int = dlsym(handle, name)
        except OSError:
            return None
        return found

    at = address("nvml_mock_live_abi_version")
    version = None if at is None else int(prototype(uint)(at)())
    _check(
        path,
        version,
        lambda name: address(name) is not None,
        lambda: int(prototype(u64)(address("nvml_mock_live_layout_bytes"))()),
    )
    event_on = prototype(u64, pointer, size, uint, uint, uint, u64, u64)(
        address("nvml_mock_live_event_on")
    )
    return event_on, u64, addressof


def _core_types(simple: type, sizeof: Callable[[type], int]) -> dict[str, type]:
    """The C types :func:`event_sender` binds with, by their ``ctypes`` names, declared on
    ``_ctypes._SimpleCData`` (*simple*) as ``ctypes`` declares its own (a test holds their
    sizes and signedness to ``ctypes``')."""
    codes = {"c_uint": "I", "c_uint64": "Q", "c_void_p": "P"}
    types = {name: type(name, (simple,), {"_type_": code}) for name, code in codes.items()}
    # c_size_t: the unsigned integer as wide as a pointer (ctypes takes unsigned long on LP64;
    # an unsigned 64-bit integer is passed the same way)
    pointer_size = sizeof(types["c_void_p"])
    types["c_size_t"] = types["c_uint" if sizeof(types["c_uint"]) == pointer_size else "c_uint64"]
    return types


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
    import ctypes

    mask = (ctypes.c_uint64 * MASK_WORDS)()
    slots = (ctypes.c_uint64 * layout.LIVE_KEY_SLOTS)()
    writes = ctypes.c_uint64()
    rc = lib.nvml_mock_live_snapshot(
        address, layout.LIVE_TOTAL_BYTES, gpu, mask, slots, ctypes.byref(writes)
    )
    return int(rc), mask, slots
