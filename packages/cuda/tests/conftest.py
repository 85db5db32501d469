"""Shared fixtures: a rendered node, the mock CUDA driver built from this checkout, and real
CUDA clients (NVIDIA's cuda-bindings, numba-cuda, nvidia-ml-py) run in processes of their own.

A client process finds the mock ``libcuda.so.1`` and the mock ``libnvidia-ml.so.1`` the way a
program on a node does: through ``LD_LIBRARY_PATH``, with the board state named by
``MOCK_NVML_CONFIG`` and the live layer beside it. Faults and allocation records are written
with the engine's ``nvml-mock-ctl`` in a process of its own, as an operator writes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
NATIVE = PACKAGE / "native"


TEST_DRIVER = "NVML_MOCK_TEST_CUDA_DRIVER"
"""A driver build to test instead of the package's (an ASan/UBSan build, say: then the
client processes keep LD_PRELOAD, which loads the sanitizer's runtime first)."""


@pytest.fixture(scope="session")
def cuda_driver() -> Path:
    """The mock libcuda.so.1, (re)built from native/ with this interpreter's cuda.h."""
    given = os.environ.get(TEST_DRIVER)
    if given:
        return Path(given)
    proc = subprocess.run(
        ["make", "-s", "-C", str(NATIVE), "driver", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"building the driver failed:\n{proc.stdout}\n{proc.stderr}"
    from nvml_mock_cuda.library import driver_path

    return driver_path()


@pytest.fixture(scope="session")
def nvml_library() -> Path:
    from nvml_mock_engine.library import library_path

    path = library_path()
    if not path.is_file():
        pytest.fail(f"the mock NVML library is not built ({path}): run `tox run -e native` first")
    return path


@dataclass
class Node:
    """A rendered node: its board state, live layer and the environment CUDA clients get."""

    root: Path
    state: Path
    live: Path
    driver: Path
    nvml: Path
    gpus: int

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MOCK_", "NVML_MOCK_", "CUDA_"))
            and k != "NVIDIA_VISIBLE_DEVICES"
            and (k != "LD_PRELOAD" or TEST_DRIVER in os.environ)
        }
        env.update(
            LD_LIBRARY_PATH=f"{self.driver.parent}:{self.nvml.parent}",
            MOCK_NVML_CONFIG=str(self.state),
            NVML_MOCK_LOCK_DIR=str(self.root / "locks"),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def ctl(self, *args: str) -> str:
        """Run ``nvml-mock-ctl`` on this node, as the operator does; its stdout."""
        proc = subprocess.run(
            [sys.executable, "-m", "nvml_mock_engine.ctl", "--live-file", str(self.live), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, f"nvml-mock-ctl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def run(self, code: str, timeout: float = 60, **env: str) -> Any:
        """Run *code* in a client process of its own; the JSON it prints last is returned.

        The process must exit 0 and print one JSON document on its last line."""
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=self.env(**env),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        assert proc.returncode == 0, f"client exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def start(self, code: str, **env: str) -> subprocess.Popen[str]:
        """Start *code* in a client process and leave it running (the caller ends it)."""
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=self.env(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def render_node(
    root: Path, driver: Path, nvml: Path, profile: str = "h100", count: int = 8
) -> Node:
    import nvml_mock_live as live
    from nvml_mock_engine.config import resolve_config
    from nvml_mock_engine.render import render_text

    root.mkdir(parents=True, exist_ok=True)
    state = root / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="node-a", profile=profile, count=count)))
    live_path = root / live.LIVE_FILE_NAME
    live.create(live_path, live.read_board(state))
    return Node(root, state, live_path, driver, nvml, count)


@pytest.fixture
def make_node(tmp_path: Path, cuda_driver: Path, nvml_library: Path) -> Iterator[Any]:
    """A factory of rendered nodes: ``make_node(profile="a100", count=4)``."""
    made = 0

    def make(profile: str = "h100", count: int = 8) -> Node:
        nonlocal made
        made += 1
        return render_node(tmp_path / f"node{made}", cuda_driver, nvml_library, profile, count)

    yield make


@pytest.fixture
def node(make_node: Any) -> Node:
    """An eight-GPU H100 node."""
    result: Node = make_node()
    return result
