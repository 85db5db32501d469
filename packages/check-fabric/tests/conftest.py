"""Shared fixtures: a clean environment, the real mock library, rendered states, a runner.

check-fabric is run in subprocesses, as in a workload container: the dynamic
loader finds the mock ``libnvidia-ml.so.1`` through ``LD_LIBRARY_PATH`` and the
library reads the state named by ``MOCK_NVML_CONFIG``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import yaml

_PREFIXES = ("CHECK_FABRIC_", "NVML_MOCK_", "MOCK_")
_NAMES = ("NODE_NAME", "LD_LIBRARY_PATH", "LD_PRELOAD")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the caller's check-fabric, mock, node or loader settings."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)


def _console_script(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"console script {name!r} is not installed in this environment")
    return found


@pytest.fixture(scope="session")
def library_dir() -> Path:
    """The directory of the real mock ``libnvidia-ml.so.1`` (built by nvml-mock-engine)."""
    from nvml_mock_engine import library_path

    path = Path(library_path())
    assert path.is_file(), f"the mock library is not built: {path}"
    return path.parent


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


RenderState = Callable[..., Path]


@pytest.fixture
def render_state(tmp_path: Path) -> RenderState:
    """Render a node's state with ``nvml-mock-engine render``; returns the state file."""

    def render(
        profile: str,
        count: int,
        node: str = "worker-1",
        config: Mapping[str, object] | None = None,
    ) -> Path:
        out = tmp_path / f"{profile}-{count}-{node}.nvmlmock"
        argv = [_console_script("nvml-mock-engine"), "render", "--profile", profile]
        argv += ["--count", str(count), "--node", node, "-o", str(out)]
        if config is not None:
            config_file = tmp_path / f"{out.stem}.yaml"
            config_file.write_text(yaml.safe_dump(dict(config)))
            argv += ["--config", str(config_file)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"render failed: {done.stderr}"
        return out

    return render


RunCheck = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_check(library_dir: Path) -> RunCheck:
    """Run ``python -m check_fabric`` against the mock library and a state (or none)."""

    def run(
        state: Path | None,
        *args: str,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        lib_dir: Path | None = None,
        stdout: int = subprocess.PIPE,
        preexec_fn: Callable[[], object] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``stdout`` may be a file descriptor to write the report to instead of capturing it;
        ``preexec_fn`` runs in the child before the exec (to drop a privilege)."""
        environ = dict(os.environ)
        environ["LD_LIBRARY_PATH"] = str(lib_dir or library_dir)
        if state is not None:
            environ["MOCK_NVML_CONFIG"] = str(state)
        environ.update(env or {})
        argv = list(command or [sys.executable, "-m", "check_fabric"]) + list(args)
        return subprocess.run(
            argv,
            env=environ,
            preexec_fn=preexec_fn,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )

    return run


@pytest.fixture
def console_script() -> Callable[[str], str]:
    return _console_script


@pytest.fixture
def no_system_nvml() -> Iterator[None]:
    """Skip when a real NVML is installed: 'library not found' cannot be produced then."""
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a system libnvidia-ml is installed")
    yield
