"""A live file cut short or overwritten in place under running NVML clients.

Root on the node can truncate the live file (``truncate -s 0``, ``: > live.nvmlmock``) or
overwrite it (``cp backup live.nvmlmock``, which truncates first, or random bytes) while
every NVML client on the node has it mapped. A page of a shared mapping past the file's
end raises SIGBUS; the library's guard (``native/src/live_guard.c``) turns that into an
error with a reason, and the client comes back once a writer or a re-stage repairs the
file. Each client here is a real process calling the real library through the real
nvidia-ml-py, with a thread calling ``nvmlDeviceGetMemoryInfo`` without pause while the
file is broken and repaired, and answering probes (memory info, an event wait) on stdin.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from nvml_mock_live.layer import SIZE

__all__: list[str] = []

UNKNOWN = 999  # NVML_ERROR_UNKNOWN
XID = 8  # nvmlEventTypeXidCriticalError

CLIENT = textwrap.dedent(
    """
    import ctypes, json, os, sys, threading
    ctypes.CDLL(os.environ["NVML_MOCK_TEST_LIB"], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
    counts = {"ok": 0, "errors": 0}
    def hammer():
        while True:
            try:
                pynvml.nvmlDeviceGetMemoryInfo(handle)
                counts["ok"] += 1
            except pynvml.NVMLError:
                counts["errors"] += 1
    threading.Thread(target=hammer, daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        if line.strip() == "reinit":  # the file was replaced: a client starting again maps it
            pynvml.nvmlShutdown()
            pynvml.nvmlInit()
        answer = dict(counts)
        try:
            answer["used"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        except pynvml.NVMLError as exc:
            answer["memory_error"] = [exc.value, pynvml.nvmlErrorString(exc.value)]
        try:
            answer["xid"] = pynvml.nvmlEventSetWait(events, 50).eventData
        except pynvml.NVMLError_Timeout:
            answer["wait"] = "timeout"
        except pynvml.NVMLError as exc:
            answer["wait_error"] = [exc.value, pynvml.nvmlErrorString(exc.value)]
        print(json.dumps(answer), flush=True)
    """
)


class Client:
    """A running NVML client process (see CLIENT)."""

    def __init__(self, state: Path, library: Path, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLIENT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "MOCK_NVML_CONFIG": str(state),
                "NVML_MOCK_TEST_LIB": str(library),
                **env,
            },
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            assert self.proc.stderr is not None
            raise AssertionError(
                f"the client died (rc {self.proc.returncode}): {self.proc.stderr.read()[-2000:]}"
            )
        return line.strip()

    def probe(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("probe\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line())
        return answer

    def reinit(self) -> dict[str, Any]:
        """nvmlShutdown and nvmlInit again (mapping the live file at its path), then a probe."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("reinit\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line())
        return answer

    def finish(self) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    started: list[Client] = []
    yield started
    for client in started:
        if client.proc.poll() is None:
            client.proc.kill()
        client.proc.wait(timeout=60)
        for pipe in (client.proc.stdin, client.proc.stdout, client.proc.stderr):
            if pipe is not None:
                pipe.close()


def broken(answer: dict[str, Any], why: str) -> None:
    """The probe got NVML_ERROR_UNKNOWN with the reason, from both calls."""
    for key in ("memory_error", "wait_error"):
        assert key in answer, answer
        code, text = answer[key]
        assert code == UNKNOWN
        assert "live layer" in text and "not usable" in text and why in text, text


def test_a_client_survives_truncation_cp_and_random_bytes(
    live_state: Path, library_file: Path, clients: list[Client], tmp_path: Path
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    client = Client(live_state, library_file)
    clients.append(client)
    board_used = client.probe()["used"]
    with live.LiveLayer.open(path) as layer:
        layer.set(0, {"memory_used_bytes": 123 << 20})
    backup = tmp_path / "backup.nvmlmock"
    shutil.copy(path, backup)
    set_used = client.probe()["used"]
    assert set_used != board_used

    subprocess.run(["truncate", "-s", "0", str(path)], check=True)
    first = client.probe()
    broken(first, "truncated")
    assert client.probe()["errors"] > first["errors"]  # and the hammering thread lives on

    subprocess.run(["cp", str(backup), str(path)], check=True)  # an older copy, in place
    back = client.probe()
    assert back["used"] == set_used and back["wait"] == "timeout"

    subprocess.run(f"head -c {SIZE} /dev/urandom > {path}", shell=True, check=True)
    answer = client.probe()
    assert "memory_error" in answer and answer["memory_error"][0] == UNKNOWN
    assert "wait_error" in answer and answer["wait_error"][0] == UNKNOWN

    with live.LiveLayer.open(path) as layer:  # a writer repairs it, then raises an Xid
        layer.event(0, XID, 79)
    repaired = client.probe()
    assert repaired["used"] == board_used and repaired["xid"] == 79

    subprocess.run(f": > {path}", shell=True, check=True)
    broken(client.probe(), "truncated")
    live.ensure(path, live.read_board(live_state))  # what a re-stage does
    assert client.probe()["used"] == board_used

    rc, err = client.finish()
    assert rc == 0, err
    assert "is usable again" in err  # said once per recovery on stderr, as init's reasons are
    assert err.count("not usable") <= 4


def test_the_guard_covers_the_mapping_after_many_replacements(
    live_state: Path, library_file: Path, clients: list[Client]
) -> None:
    """Each replacement (a re-stage writes a new file and renames it over the old one) and
    re-init maps a new file; the library holds a bounded set of mappings, each watched by the
    guard, so a truncation after 50 of them is still an error with its reason, not a SIGBUS."""
    path = live_state.parent / live.LIVE_FILE_NAME
    board = live.read_board(live_state)
    client = Client(live_state, library_file)
    clients.append(client)
    board_used = client.probe()["used"]
    inodes = set()
    seen = []
    for round_ in range(50):
        live.create(path, board, library_path=library_file)
        inodes.add(os.stat(path).st_ino)
        with live.LiveLayer.open(path) as layer:
            layer.set(0, {"memory_used_bytes": (round_ + 2) << 20})
        seen.append(client.reinit()["used"])  # each new file's value, read through its mapping
    assert [used - seen[0] for used in seen] == [round_ << 20 for round_ in range(50)]
    assert len(inodes) > 16  # more distinct files than the library keeps mappings
    os.truncate(path, 0)
    code, text = client.probe()["memory_error"]
    assert code == UNKNOWN and "not usable" in text and "truncated" in text, text
    assert client.proc.poll() is None
    live.create(path, board, library_path=library_file)  # a re-stage: the client is back
    assert client.reinit()["used"] == board_used
    rc, err = client.finish()
    assert rc == 0, err


def test_without_the_guard_a_truncation_kills(
    live_state: Path, library_file: Path, clients: list[Client]
) -> None:
    """What the guard prevents (MOCK_NVML_LIVE_GUARD=off keeps it out of the process)."""
    client = Client(live_state, library_file, MOCK_NVML_LIVE_GUARD="off")
    clients.append(client)
    client.probe()
    os.truncate(live_state.parent / live.LIVE_FILE_NAME, 0)
    assert client.proc.wait(timeout=60) == -signal.SIGBUS


FOREIGN_SIGBUS = textwrap.dedent(
    """
    import ctypes, faulthandler, mmap, os, sys
    if sys.argv[1] == "faulthandler":
        faulthandler.enable()  # the client's own SIGBUS handler, installed before NVML's
    ctypes.CDLL(os.environ["NVML_MOCK_TEST_LIB"], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), 7)
    fd = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 8192)
    mapped = mmap.mmap(fd, 8192)
    os.ftruncate(fd, 0)
    print(mapped[4096], flush=True)  # past the end of a file that is not the live layer
    print("survived", flush=True)
    """
)


@pytest.mark.parametrize("how", ["default", "faulthandler", "kill"])
def test_a_sigbus_outside_the_live_mapping_behaves_as_before(
    live_state: Path, library_file: Path, tmp_path: Path, how: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FOREIGN_SIGBUS, how, str(tmp_path / "other")],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "MOCK_NVML_CONFIG": str(live_state),
            "NVML_MOCK_TEST_LIB": str(library_file),
        },
        check=False,
    )
    assert proc.returncode == -signal.SIGBUS, proc.stderr
    assert "survived" not in proc.stdout
    if how == "faulthandler":
        assert "Fatal Python error: Bus error" in proc.stderr


def test_a_writer_repairs_a_file_cut_short_under_it(
    layer: live.LiveLayer, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer that keeps the file open (the NRI plugin, the agent) neither dies of SIGBUS
    nor writes into nothing: its next write rewrites the file in place, with a warning."""
    layer.set(1, {"temperature_c": 77})
    os.truncate(layer.path, 4096)
    with caplog.at_level(logging.WARNING, logger="nvml_mock_live.layer"):
        layer.set(0, {"temperature_c": 91})
    assert "was cut to 4096 bytes" in caplog.text and "rewritten in place" in caplog.text
    assert os.stat(layer.path).st_size == SIZE
    assert layer.values(0) == {"temperature_c": 91}
    assert layer.values(1) == {}  # what the cut took is gone; the record is whole again


def test_a_read_only_open_names_the_damage(live_state: Path) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    path.write_bytes(os.urandom(SIZE))
    with pytest.raises(live.LiveLayerError, match=r"overwritten in place.*repairs it"):
        live.LiveLayer.open(path, writable=False)
    with live.LiveLayer.open(path) as layer:  # a writer repairs it
        assert layer.values(0) == {}


def test_staging_replaces_a_truncated_live_file_with_a_clear_message(
    live_state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = live_state.parent / live.LIVE_FILE_NAME
    os.truncate(path, 100)
    with caplog.at_level(logging.WARNING, logger="nvml_mock_live.layer"):
        assert live.ensure(path, live.read_board(live_state)) is True
    assert "was cut to 100 bytes" in caplog.text and "replaced with a fresh one" in caplog.text
    assert os.stat(path).st_size == SIZE
