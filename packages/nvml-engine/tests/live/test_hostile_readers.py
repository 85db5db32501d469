"""A tenant holding locks on the shared files cannot stop a writer.

An unprivileged process (uid ``nobody``) sees a staged overlay through a read-only bind
mount in a mount namespace of its own, as a container does, opens every file of it it can
read and holds an exclusive ``flock`` on each (a read-only descriptor is enough for
``flock``). Writers (``nvml-mock-ctl``, a re-stage, an allocation record as the NRI plugin
writes it, ``nvidia-smi -pl``) then finish as they do without it. Needs root (to make the
namespace) and ``unshare``/``setpriv``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage

__all__: list[str] = []

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    held = []
    for root, dirs, files in os.walk(sys.argv[1]):
        for name in files + dirs:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            held.append(path)
    lock_dir = sys.argv[2]
    try:
        os.listdir(lock_dir)
        print("lock dir readable", flush=True)
    except OSError:
        pass
    print(f"holding {len(held)}", flush=True)
    print("\\n".join(held), file=sys.stderr, flush=True)
    time.sleep(600)
    """
)


def _tools() -> str | None:
    if os.geteuid() != 0:
        return "needs root to make a mount namespace"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@pytest.fixture
def overlay(library: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A staged overlay in a directory every user can traverse, with its own lock dir."""
    base = Path(tempfile.mkdtemp(prefix="nvml-mock-hostile-", dir="/tmp"))
    base.chmod(0o755)
    monkeypatch.setenv("NVML_MOCK_LOCK_DIR", str(base / "locks"))
    root = base / "overlay"
    config = resolve_config(profile="h100", count=2, node="node-1")
    stage(root, config, StageOptions(runtime=False, library=library, devices=False))
    (root / ".nvml-mock" / "lock").touch()  # an earlier release's lock file, if any
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def holder(overlay: Path) -> Iterator[list[str]]:
    """``nobody`` holding every file of the overlay it can open, through a read-only mount."""
    skip = _tools()
    if skip:
        pytest.skip(skip)
    view = overlay.parent / "view"
    view.mkdir(mode=0o755)
    script = overlay.parent / "holder.py"
    script.write_text(HOLDER)
    script.chmod(0o644)
    shell = (
        f"mount --bind {overlay} {view} && mount -o remount,bind,ro {view} && "
        f"exec setpriv --reuid=65534 --regid=65534 --clear-groups "
        f"{sys.executable} {script} {view} {overlay.parent / 'locks'}"
    )
    process = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    if not first.startswith("holding"):
        process.kill()
        pytest.skip(f"could not make the read-only view: {first} {process.stderr.read()[:500]}")
    held = [line.strip() for line in process.stderr.readline().split("\n") if line.strip()]
    try:
        yield [first.strip(), *held]
    finally:
        process.kill()
        process.wait(10)
        process.stdout.close()
        process.stderr.close()


def _run(*command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def test_a_read_only_holder_of_every_shared_file_stops_no_writer(
    overlay: Path, holder: list[str], library: Path
) -> None:
    assert int(holder[0].split()[1]) > 5, holder  # it holds the live file, the state, ...
    assert "lock dir readable" not in holder[0]
    live_file = overlay / "config" / live.LIVE_FILE_NAME
    bin_dir = Path(sys.executable).parent
    # nvml-mock-ctl
    ctl = _run(
        str(bin_dir / "nvml-mock-ctl"), "--overlay-path", str(overlay), "temp", "91", "-i", "0"
    )
    assert ctl.returncode == 0, ctl.stderr
    # the NRI plugin's allocation record
    with live.LiveLayer.open(live_file, library=library) as layer:
        layer.put(
            live.Allocation(container_id="c" * 64, pid=4242, gpus=(1,), used_memory_bytes=1 << 30)
        )
        assert [a.pid for a in layer.list()] == [4242]
        layer.remove("c" * 64)
        assert layer.values(0)["temperature_c"] == 91
    # a re-stage (its lock was .nvml-mock/lock, which the holder holds too)
    config = resolve_config(profile="h100", count=2, node="node-1")
    stage(overlay, config, StageOptions(runtime=False, library=library, devices=False))
    # nvidia-smi's set commands
    env = {
        **os.environ,
        "MOCK_NVML_CONFIG": str(overlay / "config" / "state.nvmlmock"),
        "LD_LIBRARY_PATH": str(overlay / "lib"),
    }
    smi = subprocess.run(
        [str(bin_dir / "nvml-mock-smi"), "-i", "0", "-pl", "500"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert smi.returncode == 0, smi.stdout + smi.stderr
    # the library's own MIG writer (nvmlDeviceSetMigMode), through the work-alike
    mig = subprocess.run(
        [str(bin_dir / "nvml-mock-smi"), "-i", "0", "-mig", "1"],
        capture_output=True, text=True, timeout=30, env=env, check=False,
    )  # fmt: skip
    assert mig.returncode == 0, mig.stdout + mig.stderr
    with live.LiveLayer.open(live_file, library=library, writable=False) as layer:
        assert layer.values(0)["temperature_c"] == 91


def _tear(overlay: Path, gpu: int) -> None:
    """Leave GPU *gpu*'s record as a writer killed between its two counter bumps does."""
    from nvml_mock_live import _layout as layout

    path = overlay / ".nvml-mock" / live.LIVE_FILE_NAME
    at = layout.LIVE_RECORDS_OFFSET + gpu * layout.LIVE_RECORD_BYTES + layout.LIVE_RECORD_SEQ
    with open(path, "r+b") as handle:
        handle.seek(at)
        seq = int.from_bytes(handle.read(8), "little")
        handle.seek(at)
        handle.write((seq | 1).to_bytes(8, "little"))


def test_a_record_left_mid_write_is_recovered_by_the_next_writer_or_a_restage(
    overlay: Path, library: Path
) -> None:
    """A writer killed mid-write wedged that GPU: set, reset and status exited 1, and a
    re-stage kept the damaged file."""
    ctl = str(Path(sys.executable).parent / "nvml-mock-ctl")
    assert _run(ctl, "--overlay-path", str(overlay), "temp", "91", "-i", "all").returncode == 0
    _tear(overlay, 0)
    status = _run(ctl, "--overlay-path", str(overlay), "status")
    assert status.returncode == 1
    assert "a writer died in the middle of writing it" in status.stderr
    assert "nvml-mock-ctl reset -i 0" in status.stderr
    fixed = _run(ctl, "--overlay-path", str(overlay), "temp", "70", "-i", "0")
    assert fixed.returncode == 0, fixed.stderr
    assert "reset to the board values" in fixed.stderr
    live_file = overlay / "config" / live.LIVE_FILE_NAME
    with live.LiveLayer.open(live_file, library=library, writable=False) as layer:
        assert layer.values(0) == {"temperature_c": 70}
        assert layer.values(1) == {"temperature_c": 91}  # the other GPU kept its value
    _tear(overlay, 1)
    config = resolve_config(profile="h100", count=2, node="node-1")
    stage(overlay, config, StageOptions(runtime=False, library=library, devices=False))
    status = _run(ctl, "--overlay-path", str(overlay), "status")
    assert status.returncode == 0, status.stderr
    with live.LiveLayer.open(live_file, library=library, writable=False) as layer:
        assert layer.values(0) == {"temperature_c": 70} and layer.values(1) == {}


def test_the_librarys_mig_writer_takes_the_same_writers_lock(overlay: Path) -> None:
    """The Python writers and the mock library's MIG writers agree on one lock file."""
    import threading

    from nvml_mock_live.layer import guarded_directory
    from nvml_mock_live.writers_lock import WritersLock

    live_file = overlay / "config" / live.LIVE_FILE_NAME
    lock = WritersLock.for_directory("live", guarded_directory(live_file))
    env = {
        **os.environ,
        "MOCK_NVML_CONFIG": str(overlay / "config" / "state.nvmlmock"),
        "LD_LIBRARY_PATH": str(overlay / "lib"),
    }
    smi = str(Path(sys.executable).parent / "nvml-mock-smi")
    done: list[subprocess.CompletedProcess[str]] = []
    with lock.held():
        worker = threading.Thread(
            target=lambda: done.append(
                subprocess.run([smi, "-i", "0", "-mig", "1"], capture_output=True, text=True,
                               timeout=60, env=env, check=False)
            )
        )  # fmt: skip
        worker.start()
        worker.join(2)
        assert worker.is_alive() and not done, "the MIG change did not wait for the lock"
    worker.join(60)
    lock.close()
    assert done and done[0].returncode == 0, done
