"""The staging DaemonSet's per-node setup, run as the pod runs it: a separate process.

The Kubernetes API it labels the node through is a local HTTP server that records the
request (there is no API server here); the engine it stages with is the real one from the
repository when its library has been built, and otherwise a stand-in script whose
command line is checked against the engine's own argument parser.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from nvml_mock_protocol import names

NODE_SETUP = REPO_ROOT / "deploy" / "image" / "node_setup.py"
ENGINE_SRC = REPO_ROOT / "packages" / "nvml-engine" / "src"
CHECK_FABRIC_SRC = REPO_ROOT / "packages" / "check-fabric" / "src"
NODE = ("node", "smi", "imex", "cuda")
"""nvml-mock-node, whose commands stage, and the packages of the tools and libraries it
stages (the mock CUDA libraries, built in place by ``tox -e native``)."""

STAND_IN_ENGINE = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    argv = sys.argv[1:]
    leaked = sorted(k for k in os.environ if k in (
        "NVML_MOCK_PROFILE", "NVML_MOCK_GPU_COUNT", "NODE_NAME", "NVML_MOCK_OVERLAY_MOUNT_PATH"))
    if leaked:
        sys.exit("flag env reached the engine: " + ",".join(leaked))
    with open(os.environ["STAND_IN_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\\n")
    if os.environ.get("STAND_IN_FAIL"):
        sys.exit(int(os.environ["STAND_IN_FAIL"]))
    root = Path(argv[1])
    for rel in ("lib/libnvidia-ml.so.1", "config/state.nvmlmock", "bin/nvidia-smi",
                "bin/check-fabric", "cdi/nvml-mock.yaml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("staged for " + argv[argv.index("--node") + 1] + "\\n")
    """
)


class ApiRecorder:
    """A stand-in API server: records requests, answers with scripted status codes."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                recorder.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status = recorder.statuses.pop(0) if recorder.statuses else 200
                body = b'{"kind":"Node"}' if status == 200 else b'{"message":"denied"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiRecorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    engine = tmp_path / "engine.py"
    engine.write_text(STAND_IN_ENGINE)
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("secret-token\n")
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "STAND_IN_LOG": str(tmp_path / "engine.log"),
        "NVML_MOCK_STAGE_COMMAND": f"{sys.executable} {engine}",
        "NVML_MOCK_OVERLAY_HOST_PATH": str(tmp_path / "overlay"),
        "NVML_MOCK_CDI_SPEC_HOST_PATH": str(tmp_path / "cdi" / "nvml-mock-nri.yaml"),
        "NVML_MOCK_PROFILE": "gb200",
        "NVML_MOCK_GPU_COUNT": "4",
        "NODE_NAME": "worker-7",
        "NVML_MOCK_NODE_LABELS": "nvidia.com/gpu.present=true",
        "NVML_MOCK_RECHECK_SECONDS": "0.2",
    }
    environ["SA_DIR"] = str(sa)
    return environ


def node_setup(
    *args: str, environ: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(NODE_SETUP), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def started(env: dict[str, str]) -> Iterator[tuple[ApiRecorder, dict[str, str]]]:
    with ApiRecorder([]) as api:
        env["NVML_MOCK_KUBE_API"] = api.url
        yield api, env


def _spawn(environ: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(NODE_SETUP),
            "run",
            "--service-account-dir",
            environ["SA_DIR"],
            *extra,
        ],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(environ: dict[str, str], proc: subprocess.Popen[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node_setup("check", environ=environ).returncode == 0:
            return
        if proc.poll() is not None:
            raise AssertionError(f"node setup exited {proc.returncode}: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("overlay never became complete")


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=10)
    return proc.returncode, err


def test_run_stages_publishes_labels_and_stops_on_sigterm(
    started: tuple[ApiRecorder, dict[str, str]], tmp_path: Path
) -> None:
    api, environ = started
    proc = _spawn(environ)
    _wait_ready(environ, proc)
    # The label comes after staging; give the PATCH a moment to land.
    deadline = time.monotonic() + 10
    while not api.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    code, err = _stop(proc)
    assert code == 0, err

    calls = [json.loads(line) for line in Path(environ["STAND_IN_LOG"]).read_text().splitlines()]
    assert calls == [
        [
            "stage",
            environ["NVML_MOCK_OVERLAY_HOST_PATH"],
            "--profile",
            "gb200",
            "--count",
            "4",
            "--node",
            "worker-7",
            "--mount-path",
            names.OVERLAY_MOUNT_PATH,
        ]
    ]
    spec = Path(environ["NVML_MOCK_CDI_SPEC_HOST_PATH"])
    assert spec.read_text() == "staged for worker-7\n"
    assert oct(spec.stat().st_mode & 0o777) == "0o644"
    assert not [p for p in spec.parent.iterdir() if p.name.startswith(".")], "temp file left"

    (request,) = api.requests
    assert request["path"] == "/api/v1/nodes/worker-7"
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["headers"]["Authorization"] == "Bearer secret-token"
    assert request["body"] == {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}


def test_a_wiped_overlay_is_staged_again(started: tuple[ApiRecorder, dict[str, str]]) -> None:
    _api, environ = started
    proc = _spawn(environ)
    _wait_ready(environ, proc)
    library = Path(environ["NVML_MOCK_OVERLAY_HOST_PATH"]) / "lib" / names.LIBRARY_NAME
    library.unlink()
    deadline = time.monotonic() + 10
    while not library.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    code, err = _stop(proc)
    assert code == 0, err
    assert library.exists()
    assert "staging it again" in err
    calls = Path(environ["STAND_IN_LOG"]).read_text().splitlines()
    assert len(calls) == 2


def test_check_names_what_is_missing(env: dict[str, str], tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    result = node_setup("check", environ=env)
    assert result.returncode == 1
    assert f"{names.OVERLAY_LIB_DIR}/{names.LIBRARY_NAME}" in result.stderr
    for rel in ("lib/libnvidia-ml.so.1", "config/state.nvmlmock", "bin/nvidia-smi"):
        (overlay / rel).parent.mkdir(parents=True, exist_ok=True)
        (overlay / rel).write_text("x")
    result = node_setup("check", environ=env)
    assert result.returncode == 1
    assert "bin/check-fabric" in result.stderr
    assert "nvidia-smi" not in result.stderr
    (overlay / "bin" / "check-fabric").write_text("x")
    assert node_setup("check", environ=env).returncode == 0


def test_a_failed_stage_fails_the_pod(started: tuple[ApiRecorder, dict[str, str]]) -> None:
    api, environ = started
    environ["STAND_IN_FAIL"] = "4"
    result = node_setup("run", "--service-account-dir", environ["SA_DIR"], environ=environ)
    assert result.returncode == 1
    assert "exited 4" in result.stderr
    assert not api.requests, "labelled a node whose overlay failed"


def test_forbidden_label_names_the_missing_permission(env: dict[str, str]) -> None:
    with ApiRecorder([403]) as api:
        env["NVML_MOCK_KUBE_API"] = api.url
        result = node_setup("run", "--service-account-dir", env["SA_DIR"], environ=env)
    assert result.returncode == 1
    assert "HTTP 403" in result.stderr
    assert "needs patch on nodes" in result.stderr
    assert len(api.requests) == 1


def test_transient_api_errors_are_retried(env: dict[str, str]) -> None:
    with ApiRecorder([503]) as api:
        env["NVML_MOCK_KUBE_API"] = api.url
        proc = _spawn(env)
        deadline = time.monotonic() + 15
        while len(api.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        code, err = _stop(proc)
    assert code == 0, err
    assert len(api.requests) == 2
    assert "retrying" in err


def test_no_labels_means_no_api_call(env: dict[str, str]) -> None:
    env["NVML_MOCK_NODE_LABELS"] = ""
    env.pop("NVML_MOCK_KUBE_API", None)
    proc = _spawn(env)
    _wait_ready(env, proc)
    code, err = _stop(proc)
    assert code == 0, err
    assert "labelled" not in err


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"NVML_MOCK_GPU_COUNT": "0"}, "NVML_MOCK_GPU_COUNT"),
        ({"NVML_MOCK_GPU_COUNT": "eight"}, "NVML_MOCK_GPU_COUNT"),
        ({"NVML_MOCK_PROFILE": ""}, "NVML_MOCK_PROFILE"),
        ({"NODE_NAME": ""}, "NODE_NAME"),
        ({"NVML_MOCK_NODE_LABELS": "gpu"}, "NVML_MOCK_NODE_LABELS"),
        ({"NVML_MOCK_RECHECK_SECONDS": "-1"}, "NVML_MOCK_RECHECK_SECONDS"),
        ({"NVML_MOCK_KUBE_API": ""}, "NVML_MOCK_KUBE_API"),
        ({"NVML_MOCK_LOG_FORMAT": "xml"}, "xml"),
    ],
)
def test_bad_configuration_exits_3_naming_the_key(
    env: dict[str, str], change: dict[str, str], needle: str
) -> None:
    env["NVML_MOCK_KUBE_API"] = "http://127.0.0.1:9"
    env.update(change)
    result = node_setup("run", environ=env)
    assert result.returncode == 3, result.stderr
    assert needle in result.stderr
    assert not Path(env["STAND_IN_LOG"]).exists(), "staged despite bad configuration"


def test_flags_win_over_env(env: dict[str, str], tmp_path: Path) -> None:
    env["NVML_MOCK_NODE_LABELS"] = ""
    result = node_setup(
        "run",
        "--count",
        "0",
        environ=env,
    )
    assert result.returncode == 3
    assert "--count" in result.stderr


def test_json_logs_are_one_object_per_line(env: dict[str, str]) -> None:
    env["NVML_MOCK_LOG_FORMAT"] = "json"
    env["NVML_MOCK_GPU_COUNT"] = "99"
    result = node_setup("run", environ=env)
    assert result.returncode == 3
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines and lines[-1]["level"] == "error"
    assert "NVML_MOCK_GPU_COUNT" in lines[-1]["msg"]


def _engine_cli_module() -> Any:
    """The engine's command line with the node's commands, both from their source trees."""
    sources = [str(ENGINE_SRC), str(ENGINE_SRC.parents[1] / "node" / "src")]
    sys.path[:0] = sources
    try:
        from nvml_mock_engine import cli
        from nvml_mock_node.commands import STAGE
    except ImportError as exc:  # pragma: no cover - depends on the engine's own deps
        pytest.skip(f"the engine's CLI does not import here: {exc}")
    finally:
        for source in sources:
            sys.path.remove(source)
    return lambda argv, environ: cli.parse_settings(argv, environ, (STAGE,))


def test_the_stage_command_line_is_the_engines(env: dict[str, str], tmp_path: Path) -> None:
    env["NVML_MOCK_NODE_LABELS"] = ""
    proc = _spawn(env)
    _wait_ready(env, proc)
    _stop(proc)
    (argv,) = [json.loads(line) for line in Path(env["STAND_IN_LOG"]).read_text().splitlines()]
    assert argv[0] == "stage"
    # resolved as the engine resolves it (flags only: the stager passes no env of its own here)
    settings = _engine_cli_module()(argv, {})
    assert str(settings.dir) == env["NVML_MOCK_OVERLAY_HOST_PATH"]
    assert (settings.profile, settings.count, settings.node) == ("gb200", 4, "worker-7")
    assert settings.mount_path == names.OVERLAY_MOUNT_PATH


@pytest.fixture(scope="module")
def engine_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A source tree of the engine whose library is built: the repository's, or one built
    here with the Dockerfile's Make target into a temporary copy (never into the checkout,
    which a parallel nvml-engine env may be building)."""
    library = ENGINE_SRC / "nvml_mock_engine" / "_lib" / names.LIBRARY_NAME
    if library.is_file():
        try:
            ctypes.CDLL(str(library))
            return ENGINE_SRC
        except OSError:
            pass  # half-written by a build running now: build a private one
    make = shutil.which("make")
    if make is None or shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("make and a C compiler are needed to build the engine's library")
    root = tmp_path_factory.mktemp("engine")
    shutil.copytree(
        ENGINE_SRC / "nvml_mock_engine",
        root / "nvml_mock_engine",
        ignore=shutil.ignore_patterns("_lib", "__pycache__"),
    )
    result = subprocess.run(
        [
            make,
            "-C",
            str(REPO_ROOT / "packages" / "nvml-engine" / "native"),
            f"BUILD={root / 'build'}",
            f"LIBDIR={root / 'nvml_mock_engine' / '_lib'}",
            f"PYTHON={sys.executable}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return root


@pytest.mark.parametrize(("count", "expected"), [("4", 4), ("", 4)])
def test_with_the_real_engine(
    env: dict[str, str], tmp_path: Path, engine_src: Path, count: str, expected: int
) -> None:
    # the engine's command with the node's commands, every package from its source tree
    sources = [engine_src, CHECK_FABRIC_SRC, *(REPO_ROOT / "packages" / p / "src" for p in NODE)]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, sources), *sys.path])
    env["NVML_MOCK_STAGE_COMMAND"] = f"{sys.executable} -m nvml_mock_node"
    env["NVML_MOCK_NODE_LABELS"] = ""
    env["NVML_MOCK_OVERLAY_MOUNT_PATH"] = str(tmp_path / "overlay")
    # As the chart sets it by default: "" means the profile's own count (4 for gb200).
    env["NVML_MOCK_GPU_COUNT"] = count
    proc = _spawn(env, "--recheck-seconds", "30")
    try:
        _wait_ready(env, proc, timeout=120)
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    overlay = Path(env["NVML_MOCK_OVERLAY_HOST_PATH"])
    state = (overlay / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME).read_text()
    assert "node_name=worker-7" in state
    assert "profile=gb200" in state
    assert f"device_count={expected}" in state
    spec = Path(env["NVML_MOCK_CDI_SPEC_HOST_PATH"]).read_text()
    assert names.CDI_KIND in spec
    # Running the staged tools needs the packages installed in the interpreter the runtime
    # is copied from; the engine's own tests and the image build (deploy/Dockerfile) do that.
