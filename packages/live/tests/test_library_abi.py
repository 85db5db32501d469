"""The library ABI contract: the real mock library passes, one of another ABI is refused, by
the full binding (``load``) and by the one-primitive binding ``nvml-mock-ctl xid`` starts with
(``event_sender``) alike."""

from __future__ import annotations

import ctypes
import mmap
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from nvml_mock_live import BoardGpu, LiveLayer, _layout, create, library
from nvml_mock_live.errors import LiveLayerError
from nvml_mock_live.kinds import EVENTS

BINDINGS: list[Callable[[Path], object]] = [library.load, library.event_sender]
"""Both ways the library is bound: every primitive, or the one ``xid`` sends with."""


def test_the_engine_registers_its_library_and_it_speaks_this_abi() -> None:
    path = library.default_library()
    assert path.name == "libnvidia-ml.so.1" and path.is_file()
    lib = library.load(path)
    assert lib.nvml_mock_live_abi_version() == _layout.LIVE_ABI_VERSION
    assert lib.nvml_mock_live_layout_bytes() == _layout.LIVE_TOTAL_BYTES


def _build(tmp_path: Path, body: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc) to build a library of another ABI")
    source = tmp_path / "other.c"
    source.write_text(body, encoding="utf-8")
    out = tmp_path / "libother.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


def _abi_source(version: int) -> str:
    return f"unsigned int nvml_mock_live_abi_version(void) {{ return {version}u; }}\n"


@pytest.mark.parametrize("bind", BINDINGS, ids=["load", "event_sender"])
def test_a_library_of_another_abi_version_is_refused(
    tmp_path: Path, bind: Callable[[Path], object]
) -> None:
    other = _build(tmp_path, _abi_source(_layout.LIVE_ABI_VERSION + 1))
    with pytest.raises(LiveLayerError, match=rf"live ABI {_layout.LIVE_ABI_VERSION + 1}, this"):
        bind(other)


@pytest.mark.parametrize("bind", BINDINGS, ids=["load", "event_sender"])
def test_a_library_without_the_abi_word_is_refused(
    tmp_path: Path, bind: Callable[[Path], object]
) -> None:
    other = _build(tmp_path, "int nvml_mock_live_write(void) { return 0; }\n")
    with pytest.raises(LiveLayerError, match="exports no nvml_mock_live_abi_version"):
        bind(other)


@pytest.mark.parametrize("bind", BINDINGS, ids=["load", "event_sender"])
def test_a_library_missing_a_primitive_is_refused(
    tmp_path: Path, bind: Callable[[Path], object]
) -> None:
    other = _build(tmp_path, _abi_source(_layout.LIVE_ABI_VERSION))
    with pytest.raises(LiveLayerError, match="has no nvml_mock_live_"):
        bind(other)


def test_the_bound_primitives_are_the_declared_ones() -> None:
    declared = set(_layout.LIVE_ABI_PRIMITIVES)
    assert declared == set(library._signatures())


@pytest.mark.parametrize("bind", BINDINGS, ids=["load", "event_sender"])
def test_a_library_that_is_no_library_is_refused(
    tmp_path: Path, bind: Callable[[Path], object]
) -> None:
    other = tmp_path / "libnot.so"
    other.write_text("not ELF\n", encoding="utf-8")
    with pytest.raises(LiveLayerError, match=f"cannot load the mock library {other}: "):
        bind(other)


def test_the_event_binding_declares_ctypes_own_c_types() -> None:
    """``event_sender`` declares its C types on ``_ctypes`` itself; each must be the C type
    ``ctypes`` names so (size, alignment, signedness), or a Python upgrade that changed the core
    would pass the event's arguments wrongly."""
    from _ctypes import _SimpleCData

    for name, declared in library._core_types(_SimpleCData, ctypes.sizeof).items():
        reference = getattr(ctypes, name)
        assert ctypes.sizeof(declared) == ctypes.sizeof(reference), name
        assert ctypes.alignment(declared) == ctypes.alignment(reference), name
        top = (1 << (8 * ctypes.sizeof(reference))) - 1  # unsigned: wraps, never negative
        assert declared(top).value == reference(top).value == top, name


def _sender_through_ctypes(path: Path) -> library.EventSender:
    """The binding ``event_sender`` falls back to where ``_ctypes`` lacks its names."""
    return library.EventSender(*library._event_on_from_ctypes(str(path)))


@pytest.mark.parametrize(
    "bind", [library.event_sender, _sender_through_ctypes], ids=["core", "ctypes"]
)
def test_the_event_binding_appends_what_the_writer_reads(
    tmp_path: Path, bind: Callable[[Path], library.EventSender]
) -> None:
    """The one-primitive binding sends through the library as ``LiveLayer.event`` does: the
    ring holds each event with its GPU and data (64 bits of it), one sequence number apart."""
    path = library.default_library()
    board = [BoardGpu(i, f"GPU-{i:08x}-0000-0000-0000-000000000000", {}) for i in range(2)]
    state = tmp_path / "state.nvmlmock"
    state.write_text(
        "".join(f"[gpu {gpu.index}]\nuuid={gpu.uuid}\n" for gpu in board), encoding="utf-8"
    )
    live_path = create(tmp_path / "live.nvmlmock", board, library_path=path)
    sender = bind(path)
    whole_gpu = {"gpu_instance": 0xFFFFFFFF, "compute_instance": 0xFFFFFFFF}
    with open(live_path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        first = sender.send(mapped, 1, EVENTS["xid"], 79, **whole_gpu)
        second = sender.send(mapped, 0, EVENTS["clock"], (1 << 64) - 1, **whole_gpu)
    assert first > 0 and second == first + 1
    with LiveLayer.open(live_path, state=state, library=path, writable=False) as layer:
        events = layer.events()
    assert [(e.seq, e.gpu, e.event_type, e.data, e.gpu_instance) for e in events] == [
        (first, 1, EVENTS["xid"], 79, None),
        (second, 0, EVENTS["clock"], (1 << 64) - 1, None),
    ]
