"""NVML events delivered from the live layer's ring to event sets, in this process and in
others already blocked in nvmlEventSetWait.

Through nvidia-ml-py bound to the built library, the real writer
(:meth:`nvml_mock_live.LiveLayer.event`), real child processes, and a real read-only
bind mount in a private mount namespace (as containers see the overlay).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, in_forked_child, needs_mount_namespaces, read_only_bind
from nvml_mock_live import _layout as _live_layout

XID = 0x8
DBE = 0x2
SBE = 0x1
CLOCK = 0x10
POWER_SOURCE = 0x80
MIG_CONFIG = 0x100
RECOVERY_ACTION = 0x8000
NO_INSTANCE = 0xFFFFFFFF
NVML_ERROR_TIMEOUT = 10


def _address(handle: Any) -> int | None:
    value: int | None = ctypes.cast(handle, ctypes.c_void_p).value
    return value


def _drain(pynvml: Any, event_set: Any) -> list[tuple[int, int, int]]:
    """Every event the set has now, as (GPU index, type, data), until a wait times out."""
    got = []
    handles = {
        _address(pynvml.nvmlDeviceGetHandleByIndex(i)): i
        for i in range(pynvml.nvmlDeviceGetCount())
    }
    while True:
        try:
            data = pynvml.nvmlEventSetWait(event_set, 0)
        except pynvml.NVMLError_Timeout:
            return got
        got.append((handles[_address(data.device)], data.eventType, data.eventData))


def test_an_event_set_receives_the_events_written_after_it_registered_in_order(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    layer.event(0, XID, 13)  # before the set exists
    event_set = pynvml.nvmlEventSetCreate()
    layer.event(0, XID, 31)  # before it registered
    pynvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
    for xid in (43, 48, 79):
        layer.event(0, XID, xid)
    data = pynvml.nvmlEventSetWait(event_set, 1000)
    assert (_address(data.device), data.eventType, data.eventData) == (_address(handle), XID, 43)
    assert (data.gpuInstanceId, data.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    assert _drain(pynvml, event_set) == [(0, XID, 48), (0, XID, 79)]
    pynvml.nvmlEventSetFree(event_set)


def test_only_registered_types_and_devices_are_delivered(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h0, XID, event_set)
    layer.event(0, DBE, 0)  # a type it did not register
    layer.event(1, XID, 62)  # a GPU it did not register
    layer.event(0, XID, 48)
    assert _drain(pynvml, event_set) == [(0, XID, 48)]
    pynvml.nvmlDeviceRegisterEvents(h1, XID | DBE, event_set)  # from now on, GPU 1 too
    pynvml.nvmlDeviceRegisterEvents(h0, DBE, event_set)
    layer.event(1, DBE, 0)
    layer.event(0, SBE, 0)  # still not registered on either GPU
    layer.event(0, DBE, 0)
    layer.event(1, XID, 79)
    assert _drain(pynvml, event_set) == [(1, DBE, 0), (0, DBE, 0), (1, XID, 79)]
    pynvml.nvmlEventSetFree(event_set)


def test_two_sets_each_receive_every_event_they_registered_for(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    first, second = pynvml.nvmlEventSetCreate(), pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, XID, first)
    layer.event(1, XID, 94)
    pynvml.nvmlDeviceRegisterEvents(handle, XID, second)
    layer.event(1, XID, 95)
    assert _drain(pynvml, first) == [(1, XID, 94), (1, XID, 95)]
    assert _drain(pynvml, second) == [(1, XID, 95)]


def test_a_lapped_set_goes_on_from_the_oldest_event_still_in_the_ring(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), XID, event_set)
    slots = _live_layout.LIVE_EVENT_SLOTS
    extra = 10
    for data in range(1, slots + extra + 1):
        layer.event(0, XID, data)
    assert [d for _, _, d in _drain(pynvml, event_set)] == list(range(extra + 1, slots + extra + 1))
    layer.event(0, XID, 1)
    assert _drain(pynvml, event_set) == [(0, XID, 1)]


def test_wait_v3_delivers_the_event_in_the_extended_format(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
    layer.event(1, XID, 79)
    params = pynvml.c_nvmlEventSetWait_v3_t()
    params.timeoutMs = 1000
    pynvml.nvmlEventSetWait_v3(event_set, params)
    assert (params.dataType, params.eventType, params.eventData) == (0, XID, 79)
    assert params.uuid == pynvml.nvmlDeviceGetUUID(handle)
    assert (params.gpuInstanceId, params.computeInstanceId, params.timestampUsec) == (
        NO_INSTANCE,
        NO_INSTANCE,
        0,
    )
    params.timeoutMs = 0
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v3(event_set, params)


def test_the_supported_types_follow_the_board(pynvml: Any, write_state: StateWriter) -> None:
    from conftest import gpu_entry

    write_state(gpus=[gpu_entry(0), gpu_entry(1, ecc_supported=0, ecc_enabled=0, mig_capable=0)])
    pynvml.nvmlInit()
    full = pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(0))
    bare = pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(1))
    common = XID | CLOCK | POWER_SOURCE | RECOVERY_ACTION
    assert full & (common | SBE | DBE | MIG_CONFIG) == common | SBE | DBE | MIG_CONFIG
    assert bare & common == common
    assert bare & (SBE | DBE | MIG_CONFIG) == 0


def test_a_lost_gpu_still_delivers_its_xid(pynvml: Any, layer: live.LiveLayer) -> None:
    """Fallen off the bus: Xid 79 reaches the waiter, then every call on the GPU is lost."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
    layer.event(1, XID, 79)
    layer.set(1, {"gpu_lost": 1})
    data = pynvml.nvmlEventSetWait(event_set, 1000)
    assert (_address(data.device), data.eventData) == (_address(handle), 79)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(data.device)


def test_without_a_live_layer_a_wait_blocks_for_its_timeout(pynvml: Any, live_state: Path) -> None:
    """A process that found no live layer at init sees no event, even one written to a file
    created later, and its wait really blocks (a health loop must not spin)."""
    path = live_state.parent / live.LIVE_FILE_NAME
    path.unlink()
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), XID, event_set)
    live.create(path, live.read_board(live_state))
    with live.LiveLayer.open(path) as layer:
        layer.event(0, XID, 79)
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 300)
    assert time.monotonic() - start >= 0.3
    pynvml.nvmlEventSetFree(event_set)


def test_with_a_live_layer_a_wait_without_events_blocks_for_its_timeout(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), XID, event_set)
    layer.event(0, XID, 48)
    assert pynvml.nvmlEventSetWait(event_set, 1000).eventData == 48
    layer.event(1, XID, 79)  # another GPU: the waiter finds nothing for it and sleeps on
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 300)
    assert time.monotonic() - start >= 0.3


def _wait_in_thread(
    cnvml: ctypes.CDLL, event_set: ctypes.c_void_p, timeout_ms: int
) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def run() -> None:
        data = (ctypes.c_ubyte * 40)()
        rc = cnvml.nvmlEventSetWait_v2(event_set, data, timeout_ms)
        result.append((rc, int.from_bytes(bytes(data[16:24]), "little")))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)


def _ring_words(pid: int) -> set[int]:
    """The addresses of the live layer's futex word in each of the library's read-only
    mappings of a live file: a process keeps earlier tests' (retired) mappings too, and the
    waiter sleeps on the word of the one it loaded, which need not be the first listed."""
    words: set[int] = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if (
            len(fields) >= 6
            and fields[-1].endswith("/" + live.LIVE_FILE_NAME)
            and fields[1] == "r--s"
            and int(fields[2], 16) == 0
        ):
            words.add(
                int(fields[0].split("-")[0], 16) + _live_layout.LIVE_HEADER_FIELDS["event_futex"][1]
            )
    return words


def _blocked_in_wait(pid: int, tid: int | None = None) -> bool:
    """Whether the thread (any thread of the process when None) sleeps in FUTEX_WAIT on the
    live layer's word, i.e. is inside nvmlEventSetWait (not, say, waiting for the GIL)."""
    if _FUTEX_SYSCALL is None:
        pytest.skip(f"no futex syscall number known for {os.uname().machine}")
    words = _ring_words(pid)
    tasks = Path(f"/proc/{pid}/task")
    for task in [tid] if tid is not None else [int(t.name) for t in tasks.iterdir()]:
        try:
            fields = (tasks / str(task) / "syscall").read_text().split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] == str(_FUTEX_SYSCALL) and int(fields[1], 16) in words:
            return True
    return False


def _until(condition: Any, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


def test_free_wakes_its_waiters_at_once_and_leaves_other_sets_waiting(
    pynvml: Any, cnvml: ctypes.CDLL, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    doomed, kept = ctypes.c_void_p(), ctypes.c_void_p()
    assert cnvml.nvmlEventSetCreate(ctypes.byref(doomed)) == 0
    assert cnvml.nvmlEventSetCreate(ctypes.byref(kept)) == 0
    for event_set in (doomed, kept):
        assert cnvml.nvmlDeviceRegisterEvents(handle, ctypes.c_ulonglong(XID), event_set) == 0
    waiters = [_wait_in_thread(cnvml, doomed, 60_000) for _ in range(3)]
    keeper, kept_result = _wait_in_thread(cnvml, kept, 60_000)
    native = [t.native_id for t, _ in waiters] + [keeper.native_id]
    _until(
        lambda: all(_blocked_in_wait(os.getpid(), tid) for tid in native if tid),
        "the waiters to block",
    )
    start = time.monotonic()
    assert cnvml.nvmlEventSetFree(doomed) == 0
    for thread, result in waiters:
        thread.join(30)
        assert not thread.is_alive()
        assert result[0][0] == NVML_ERROR_TIMEOUT
    assert time.monotonic() - start < 30
    assert keeper.is_alive()  # woken by the free's wake, it found nothing and sleeps on
    layer.event(0, XID, 79)
    keeper.join(30)
    assert kept_result == [(0, 79)]
    assert cnvml.nvmlEventSetFree(kept) == 0


WAITER = textwrap.dedent(
    """
    import ctypes, json, sys, time
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(sys.argv[2]))
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, 0x8, event_set)
    print("ready", flush=True)
    start = time.monotonic()
    try:
        data = pynvml.nvmlEventSetWait(event_set, 30000)
        answer = {"type": data.eventType, "data": data.eventData}
    except pynvml.NVMLError as exc:
        answer = {"error": str(exc)}
    answer["waited"] = time.monotonic() - start
    print(json.dumps(answer), flush=True)
    """
)


def _start_waiter(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        pytest.fail(f"the waiter did not start: {line!r} {proc.communicate()[1]}")
    return proc


def _xid_reaches_a_blocked_waiter(
    proc: subprocess.Popen[str], live_file: Path, *, console_script: Path | None = None
) -> dict[str, Any]:
    """Once the waiter sleeps in its 30 s wait, write Xid 79 on GPU 1 (through the live layer,
    or with the installed ``nvml-mock-ctl xid``, whose quick path binds the primitive on its
    own); return its answer."""
    try:
        _until(lambda: _blocked_in_wait(proc.pid), "the waiter to block in nvmlEventSetWait")
        written = time.monotonic()
        if console_script is None:
            with live.LiveLayer.open(live_file) as layer:
                layer.event(1, XID, 79)
        else:
            argv = [str(console_script), "--live-file", str(live_file), "xid", "79", "-i", "1"]
            sent = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            assert (sent.returncode, sent.stderr) == (0, ""), sent
        assert proc.stdout is not None
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        answer["after_write"] = time.monotonic() - written
        return answer
    finally:
        proc.kill()
        proc.communicate()


def test_an_xid_wakes_a_waiter_blocked_in_another_process_at_once(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    env = dict(os.environ, MOCK_NVML_CONFIG=str(live_state))
    proc = _start_waiter([sys.executable, str(script), str(library_file), "1"], env)
    answer = _xid_reaches_a_blocked_waiter(proc, live_state.parent / live.LIVE_FILE_NAME)
    assert (answer.get("type"), answer.get("data")) == (XID, 79), answer
    # woken by the write, not by its 30 s timeout (a generous bound, not a latency figure)
    assert answer["after_write"] < 5 and answer["waited"] < 25, answer


CONSOLE_SCRIPT = Path(sys.executable).parent / "nvml-mock-ctl"


@pytest.mark.skipif(not CONSOLE_SCRIPT.is_file(), reason="no installed nvml-mock-ctl script")
def test_nvml_mock_ctl_xid_wakes_a_waiter_blocked_in_another_process_at_once(
    library_file: Path, live_state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nvml-mock-ctl xid`` sends through the library's primitive, as the live layer does:
    a process asleep in ``nvmlEventSetWait`` wakes with the Xid, not at its timeout."""
    monkeypatch.setenv("NVML_MOCK_LOCK_DIR", str(tmp_path / "locks"))
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    env = dict(os.environ, MOCK_NVML_CONFIG=str(live_state))
    proc = _start_waiter([sys.executable, str(script), str(library_file), "1"], env)
    answer = _xid_reaches_a_blocked_waiter(
        proc, live_state.parent / live.LIVE_FILE_NAME, console_script=CONSOLE_SCRIPT
    )
    assert (answer.get("type"), answer.get("data")) == (XID, 79), answer
    assert answer["after_write"] < 5 and answer["waited"] < 25, answer


@needs_mount_namespaces
def test_an_xid_wakes_a_waiter_that_maps_the_layer_through_a_read_only_bind_mount(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    """As in a container: the waiter maps the live layer read-only at another path in its own
    mount namespace and sleeps on the futex word there; the node's write wakes it."""
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    mount = tmp_path / "mnt"
    mount.mkdir()
    host = live_state.parent
    inner = read_only_bind(host, mount) + f"exec {sys.executable} {script} {library_file} 1"
    env = dict(os.environ, MOCK_NVML_CONFIG=str(mount / live_state.name))
    proc = _start_waiter(["unshare", "-m", "--propagation", "private", "sh", "-c", inner], env)
    answer = _xid_reaches_a_blocked_waiter(proc, host / live.LIVE_FILE_NAME)
    assert (answer.get("type"), answer.get("data")) == (XID, 79), answer
    assert answer["after_write"] < 5 and answer["waited"] < 25, answer


IDLE_WAITER = textwrap.dedent(
    """
    import ctypes, resource, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    events = pynvml.nvmlEventSetCreate()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        pynvml.nvmlEventSetWait_v2(events, 3000)
        print("event")
    except pynvml.NVMLError_Timeout:
        after = resource.getrusage(resource.RUSAGE_SELF)
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"timeout cpu={used:.4f}")
    """
)


def test_a_waiter_blocked_for_seconds_uses_no_cpu(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    """A device plugin's health loop sits in nvmlEventSetWait all day: it must sleep on the
    futex, not poll. Three seconds of waiting may cost at most a few milliseconds of CPU."""
    script = tmp_path / "idle_waiter.py"
    script.write_text(IDLE_WAITER)
    done = subprocess.run(
        [sys.executable, str(script), str(library_file)],
        env=dict(os.environ, MOCK_NVML_CONFIG=str(live_state)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    verdict, _, cpu = done.stdout.strip().partition(" cpu=")
    assert verdict == "timeout"
    assert float(cpu) < 0.05, f"the waiter used {cpu} s of CPU in 3 s"


def test_a_lost_gpu_ends_a_wait_with_gpu_is_lost_once_per_loss(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    """NVIDIA's DRA driver taints every device gpu-lost when nvmlEventSetWait answers
    NVML_ERROR_GPU_IS_LOST: the ring's Xid 79 comes first, then the loss, once per set and
    loss (so a loop that waits again does not spin), and again after the GPU came back and
    was lost anew."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
    other = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), XID, other)
    layer.event(1, XID, 79)
    layer.set(1, {"gpu_lost": 1})
    assert pynvml.nvmlEventSetWait(event_set, 1000).eventData == 79
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait(event_set, 1000)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 0)
    with pytest.raises(pynvml.NVMLError_Timeout):  # a set without the lost GPU is not told
        pynvml.nvmlEventSetWait(other, 0)
    layer.clear(1, ["gpu_lost"])
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 0)
    layer.set(1, {"gpu_lost": 1})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait(event_set, 0)
    layer.clear(1, ["gpu_lost"])


def test_a_blocked_waiter_learns_of_a_loss_without_an_event(
    pynvml: Any, layer: live.LiveLayer
) -> None:
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(1), XID, event_set)
    outcome: list[str] = []

    def wait() -> None:
        try:
            pynvml.nvmlEventSetWait(event_set, 10000)
            outcome.append("event")
        except pynvml.NVMLError_GpuIsLost:
            outcome.append("lost")
        except pynvml.NVMLError_Timeout:
            outcome.append("timeout")

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    layer.set(1, {"gpu_lost": 1})
    # told within a slice of the wait (250 ms), not at its 10 s timeout
    waiter.join(5)
    told_early = not waiter.is_alive()
    waiter.join(10)
    assert outcome == ["lost"] and told_early
    layer.clear(1, ["gpu_lost"])


FLOODER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fd = os.open(sys.argv[1], os.O_RDONLY)
    base = libc.mmap(None, os.fstat(fd).st_size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    word = ctypes.c_void_p(base + int(sys.argv[2]))
    print("flooding", flush=True)
    end = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < end:
        libc.syscall(202, word, 1, 0x7FFFFFFF, None, None, 0)  # FUTEX_WAKE, everyone
    """
)


@needs_mount_namespaces
def test_a_tenant_flooding_futex_wakes_gets_no_false_event_and_costs_little(
    library_file: Path, live_state: Path, tmp_path: Path
) -> None:
    """Any tenant may FUTEX_WAKE the ring's word through its read-only mapping: a waiter took
    0.04 s of CPU per 10 s, and 1.5 s under such a flood. Spurious wakes never return an event,
    and past a few the waiter looks at the word once a millisecond."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop to an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="nvml-mock-flood-", dir="/tmp"))
    try:
        base.chmod(0o755)
        host = base / "host"
        shutil.copytree(live_state.parent, host)
        host.chmod(0o755)
        (base / "flood.py").write_text(FLOODER)
        mount = base / "mnt"
        mount.mkdir()
        offset = _live_layout.LIVE_HEADER_FIELDS["event_futex"][1]
        inner = read_only_bind(host, mount) + (
            f"exec setpriv --reuid=65534 --regid=65534 --clear-groups {sys.executable} "
            f"{base / 'flood.py'} {mount / live.LIVE_FILE_NAME} {offset} 6"
        )
        flood = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", inner],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert flood.stdout is not None and flood.stdout.readline() == "flooding\n"
            script = tmp_path / "idle_waiter.py"
            script.write_text(IDLE_WAITER)
            done = subprocess.run(
                [sys.executable, str(script), str(library_file)],
                env=dict(os.environ, MOCK_NVML_CONFIG=str(host / live_state.name)),
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert flood.poll() is None, "the flood ended before the wait did"
        finally:
            flood.kill()
            _, flood_err = flood.communicate(timeout=10)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, done.stderr + flood_err
    verdict, _, cpu = done.stdout.strip().partition(" cpu=")
    assert verdict == "timeout", "a spurious wake returned an event"
    assert float(cpu) < 0.3, f"the flooded waiter used {cpu} s of CPU in 3 s"


def test_a_forked_child_receives_events_on_a_set_a_parent_thread_waits_on(
    pynvml: Any, cnvml: ctypes.CDLL, layer: live.LiveLayer
) -> None:
    """The child inherits the set with its registrations and position in the ring: an Xid
    written after the fork reaches it, and it frees the set, although the parent's waiter
    (not copied by fork) was asleep on the ring's futex."""
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
    got: list[int] = []
    waiter = threading.Thread(
        target=lambda: got.append(pynvml.nvmlEventSetWait(event_set, 60_000).eventData)
    )
    waiter.start()
    time.sleep(0.2)  # asleep on the futex

    def child() -> str:
        data = pynvml.nvmlEventSetWait(event_set, 10_000)
        freed = cnvml.nvmlEventSetFree(event_set)
        return f"{data.eventType} {data.eventData} {freed}"

    writer = threading.Timer(0.3, layer.event, args=(0, XID, 79))
    writer.start()
    try:
        assert in_forked_child(child) == f"{XID} 79 0"
    finally:
        writer.join()
    waiter.join(10)
    assert got == [79]  # the parent's waiter, too
    pynvml.nvmlEventSetFree(event_set)
