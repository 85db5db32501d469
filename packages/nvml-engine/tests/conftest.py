"""Shared fixtures: a freshly built mock library, small rendered states, and pynvml bound to it.

The library is rebuilt from ``native/`` once per session (make is a no-op when nothing
changed) so the tests always exercise the current C sources. States are written here,
key by key, from STATE-FORMAT.md, so the library's tests do not depend on the renderer.
nvidia-ml-py loads ``libnvidia-ml.so.1`` by soname; loading our build first under that
soname makes pynvml bind to it in this process without touching ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
NATIVE = PACKAGE / "native"
# nvml-mock-smi's helpers (smi_fixtures) run nvidia-smi against the library: some of the
# library's tests look at it as that tool does.
sys.path.insert(0, str(PACKAGE.parent / "smi" / "tests"))

if os.environ.get("NVML_MOCK_TEST_LIBRARY"):
    # A sanitizer build under test is loaded before anything else: the live writer loads the
    # package's own library by its path, and were that first, pynvml's dlopen of the soname
    # would get it, and test (and shut down) it instead of the build under test.
    ctypes.CDLL(os.environ["NVML_MOCK_TEST_LIBRARY"], mode=ctypes.RTLD_GLOBAL)

MOCK_ENV = (
    "MOCK_NVML_CONFIG",
    "MOCK_NVML_LIVE",
    "MOCK_NVML_NOW_MS",
    "MOCK_FABRIC_CLUSTER_UUID",
    "MOCK_FABRIC_CLIQUE_ID",
    "MOCK_FABRIC_DOMAIN",
    "NVIDIA_VISIBLE_DEVICES",
)

SYSTEM: dict[str, Any] = {
    "driver_version": "580.65.06",
    "nvml_version": "13.580.65.06",
    "cuda_driver_version": 13000,
    "node_name": "node-a",
    "profile": "test",
}

CLUSTER_UUID = "6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e"


def gpu_entry(index: int, **overrides: Any) -> dict[str, Any]:
    """One GPU with every required key (an H100 SXM5-like board), plus overrides."""
    bus = 0x18 + index
    gpu: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-0100010{index // 16:x}-1111-2222-3333-{index:012x}",
        "serial": f"165322030{index:04d}",
        "board_part_number": "692-2G520-0200-000",
        "board_id": 0x1800 + index * 0x100,
        "minor_number": index,
        "brand": 14,
        "architecture": 9,
        "cuda_cc_major": 9,
        "cuda_cc_minor": 0,
        "module_id": index + 1,
        "vbios_version": "96.00.99.00.01",
        "inforom_image_version": "G520.0200.00.05",
        "inforom_oem": "2.1",
        "inforom_ecc": "7.16",
        "inforom_power": "",
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "pci_device_id": "0x233010DE",
        "pci_subsystem_id": "0x16C110DE",
        "pcie_max_gen": 5,
        "pcie_max_width": 16,
        "pcie_cur_gen": 5,
        "pcie_cur_width": 16,
        "memory_total_bytes": 85520809984,
        "memory_reserved_bytes": 566231040,
        "memory_used_bytes": 1048576,
        "memory_bus_width": 5120,
        "bar1_total_bytes": 137438953472,
        "bar1_used_bytes": 1048576,
        "numa_node": 0 if index < 4 else 1,
        "cpu_affinity": "0-55,112-167" if index < 4 else "56-111,168-223",
        "persistence_mode": 1,
        "display_mode": 0,
        "display_active": 0,
        "clock_graphics_mhz": 345,
        "clock_sm_mhz": 345,
        "clock_mem_mhz": 2619,
        "clock_video_mhz": 765,
        "max_clock_graphics_mhz": 1980,
        "max_clock_sm_mhz": 1980,
        "max_clock_mem_mhz": 2619,
        "max_clock_video_mhz": 1545,
        "power_usage_mw": 71234,
        "power_limit_mw": 700000,
        "power_default_limit_mw": 700000,
        "power_min_limit_mw": 200000,
        "power_max_limit_mw": 700000,
        "temperature_c": 31,
        "temp_shutdown_c": 92,
        "temp_slowdown_c": 89,
        "temp_gpu_max_c": 87,
        "temp_mem_max_c": 95,
        "margin_temperature_supported": 1,
        "memory_temperature_c": 38,
        "ecc_enabled": 1,
        "mig_capable": 1,
        "pstate": 0,
        "nvlink_count": 18,
        "nvlink_version": 6,
        "nvlink_remote_bus_ids": "00000000:05:00.0,00000000:06:00.0",
        "gpu_group": 0,
        "fabric_attached": 1,
        "fabric_cluster_uuid": "00000000-0000-0000-0000-000000000001",
        "fabric_clique_id": 0,
        "multiprocessor_count": 132,
    }
    gpu.update(overrides)
    return gpu


def render_state(system: Mapping[str, Any], gpus: list[Mapping[str, Any]]) -> str:
    """Serialise a state in format 1 (None values are left out)."""
    lines = ["nvml-mock-state 1", "# written by the test fixtures", "[system]"]
    sys_keys = {"device_count": len(gpus), **system}
    lines += [f"{k}={v}" for k, v in sys_keys.items() if v is not None]
    for i, gpu in enumerate(gpus):
        lines.append(f"[gpu {i}]")
        lines += [f"{k}={v}" for k, v in gpu.items() if v is not None]
    return "\n".join(lines) + "\n"


StateWriter = Callable[..., Path]


@pytest.fixture
def write_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateWriter:
    """Write a state of ``count`` GPUs (or explicit ``gpus``) and point MOCK_NVML_CONFIG at it."""

    def write(
        count: int = 2,
        *,
        gpus: list[Mapping[str, Any]] | None = None,
        system: Mapping[str, Any] | None = None,
        text: str | None = None,
        name: str = "state.nvmlmock",
        **gpu_overrides: Any,
    ) -> Path:
        path = tmp_path / name
        if text is None:
            gpu_list = (
                gpus if gpus is not None else [gpu_entry(i, **gpu_overrides) for i in range(count)]
            )
            text = render_state({**SYSTEM, **(system or {})}, gpu_list)
        path.write_text(text)
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
        return path

    return write


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MOCK_ENV:
        monkeypatch.delenv(name, raising=False)


def _build() -> Path:
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["make", "-s", "-C", str(NATIVE)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"make -C native failed:\n{proc.stdout}\n{proc.stderr}")
    from nvml_mock_engine.library import library_path

    return library_path()


@pytest.fixture(scope="session")
def library() -> Path:
    """The library this checkout builds (make), as staging copies it into an overlay."""
    return _build()


@pytest.fixture(scope="session")
def library_file() -> Path:
    """The freshly built library, or NVML_MOCK_TEST_LIBRARY (a sanitizer build: Makefile)."""
    override = os.environ.get("NVML_MOCK_TEST_LIBRARY")
    return Path(override) if override else _build()


@pytest.fixture(scope="session")
def cnvml(library_file: Path) -> ctypes.CDLL:
    """The library loaded under its soname; later dlopen("libnvidia-ml.so.1") returns it."""
    return ctypes.CDLL(str(library_file), mode=ctypes.RTLD_GLOBAL)


@pytest.fixture
def pynvml(cnvml: ctypes.CDLL) -> Iterator[Any]:
    """nvidia-ml-py bound to the mock; every init a test makes is undone afterwards."""
    import pynvml as module

    yield module
    while cnvml.nvmlShutdown() == 0:
        pass
    module._nvmlLib_refcount = 0


@pytest.fixture
def nvml(pynvml: Any, write_state: StateWriter) -> Any:
    """pynvml initialised on a default two-GPU state."""
    write_state()
    pynvml.nvmlInit()
    return pynvml


def can_unshare_mounts() -> bool:
    """Whether this test run may make private mount namespaces (root and ``unshare -m``)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return False
    return subprocess.run([unshare, "-m", "true"], capture_output=True, check=False).returncode == 0


needs_mount_namespaces = pytest.mark.skipif(
    not can_unshare_mounts(), reason="needs root and mount namespaces (unshare -m)"
)
"""For the tests that see the overlay as a container does: through a read-only bind mount."""


def read_only_bind(host: Path, mount: Path) -> str:
    """Shell text (run under ``unshare -m``) that shows *host* read-only at *mount*, as the NRI
    plugin's overlay mount does in a container; a command follows it."""
    return f"mount --bind {host} {mount} && mount -o remount,bind,ro {mount} && "


@pytest.fixture
def live_state(write_state: StateWriter) -> Path:
    """A two-GPU state with a fresh live layer beside it."""
    import nvml_mock_live as live

    state = write_state()
    live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    return state


@pytest.fixture
def layer(live_state: Path) -> Iterator[Any]:
    """The live layer of ``live_state``, open for writing."""
    import nvml_mock_live as live

    with live.LiveLayer.open(live_state.parent / live.LIVE_FILE_NAME) as opened:
        yield opened


def require_thread_sanitizer(tsan_dir: Path) -> None:
    """Skip, saying why, unless a compiler builds and runs ThreadSanitizer programs here."""
    probe = subprocess.run(
        ["make", "-s", "-C", str(tsan_dir), "tsan-available", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("no compiler with a working ThreadSanitizer runtime (TSAN_CC, default clang)")


def run_with_visible(
    script: str, args: list[str], visible: str | None, *, mock_visible: str | None = None
) -> tuple[dict[str, Any], str]:
    """Run *script* in a child process (the variable must be set before its ``nvmlInit``)
    with ``NVIDIA_VISIBLE_DEVICES`` set to *visible*, or unset for None (and the mock's own
    ``MOCK_NVML_VISIBLE_DEVICES`` to *mock_visible*); its JSON output and its stderr. A
    failing child fails the test with its stderr."""
    env = dict(os.environ)
    env.pop("NVIDIA_VISIBLE_DEVICES", None)
    env.pop("MOCK_NVML_VISIBLE_DEVICES", None)
    if visible is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = visible
    if mock_visible is not None:
        env["MOCK_NVML_VISIBLE_DEVICES"] = mock_visible
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result, proc.stderr


def in_forked_child(work: Callable[[], str], timeout: float = 10.0) -> str:
    """Run *work* in a child made by a bare ``fork()`` (this process's threads left behind, as
    a client that forks sees them) and return what it returned; a child that does not finish
    within *timeout* seconds is killed and the test fails, saying so."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread; answer through the pipe, never return
        try:
            answer = work()
        except BaseException as exc:  # reported to the parent, never raised in the child
            answer = f"raised {exc!r}"
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], timeout)
        if not ready:
            os.kill(pid, 9)
            pytest.fail(f"the forked child did not finish within {timeout} s")
        return os.read(read_end, 4096).decode()
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)


NVML_ERROR_INVALID_ARGUMENT = 2


def race_frees(
    calls: Sequence[Callable[[], int]], frees: Sequence[Callable[[], int]], settle: float = 0.005
) -> list[list[int]]:
    """Run each of *calls* on a thread of its own, in a loop, until it answers
    INVALID_ARGUMENT (its handle is gone), while *frees* run (each must answer 0) once the
    threads have had *settle* seconds of calls; every thread's answers, in order."""
    answers: list[list[int]] = [[] for _ in calls]

    def loop(call: Callable[[], int], mine: list[int]) -> None:
        while not mine or mine[-1] != NVML_ERROR_INVALID_ARGUMENT:
            mine.append(call())

    threads = [
        threading.Thread(target=loop, args=(call, mine))
        for call, mine in zip(calls, answers, strict=True)
    ]
    for t in threads:
        t.start()
    time.sleep(settle)
    assert [free() for free in frees] == [0] * len(frees)
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a call on a freed handle did not return"
    return answers


def wait_for_line(log: Path, marker: str, process: subprocess.Popen[bytes]) -> str:
    """The first line of *log* holding *marker*, read as *process* writes it; fails the test
    when the process ends first or none comes within 60 s (a start, not a speed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        found = [line for line in lines if marker in line]
        if found:
            return found[0]
        if process.poll() is not None:
            pytest.fail(f"the process ended ({process.returncode}) before {marker!r}:\n{lines}")
        time.sleep(0.05)
    pytest.fail(f"no line with {marker!r} in {log} within 60 s")
