"""The command: settings from flags and env twins, the README's table, exit codes, labels."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Exporter, Node, get, parse
from nvml_mock_exporter.settings import OPTIONS, Settings, parse_settings
from nvml_mock_protocol import settings as s

README = Path(__file__).resolve().parents[1] / "README.md"


def run(node: Node, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_exporter", *args],
        env=node.env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_readme_table_is_the_declaration() -> None:
    assert s.check_declaration(Settings, OPTIONS) == []
    assert s.markdown_table(README.read_text()) == s.options_table(OPTIONS, Settings())


def test_flags_win_over_env_twins_and_empty_env_is_unset() -> None:
    env = {"NVML_MOCK_EXPORTER_PORT": "9500", "NVML_MOCK_EXPORTER_HOSTNAME_LABEL": ""}
    assert parse_settings([], env).port == 9500
    assert parse_settings(["--port", "9600"], env).port == 9600
    assert parse_settings([], env).hostname_label == "hostname"
    assert parse_settings([], {}).port == 9400


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--port", "70000"], {}, "--port='70000'"),
        ([], {"NVML_MOCK_EXPORTER_HOSTNAME_LABEL": "host"}, "NVML_MOCK_EXPORTER_HOSTNAME_LABEL"),
        (["--collect-interval", "0"], {}, "--collect-interval='0'"),
    ],
)
def test_a_bad_value_exits_3_naming_the_key(
    node: Node, args: list[str], env: dict[str, str], message: str
) -> None:
    proc = run(node, *args, **env)
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr


def test_usage_errors_exit_2_and_version_0(node: Node) -> None:
    assert run(node, "--no-such-flag").returncode == 2
    version = run(node, "--version")
    assert (version.returncode, version.stdout.split()[0]) == (0, "nvml-mock-exporter")


def test_without_nvml_the_start_fails_naming_it(node: Node) -> None:
    proc = run(node, "--port", "0", LD_LIBRARY_PATH="/nonexistent")
    assert proc.returncode == 3
    assert "cannot start: NVML" in proc.stderr


def test_a_port_in_use_exits_3(node: Node) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(node, "--host", "127.0.0.1", "--port", str(port))
    assert proc.returncode == 3
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr


@pytest.mark.parametrize("key", ["hostname", "Hostname"])
def test_the_host_label_key_is_chosen(
    key: str, run_exporter: Callable[..., Exporter], node: Node
) -> None:
    exporter = run_exporter("--hostname-label", key, env=node.env(NODE_NAME="gpu-node-7"))
    sample = parse(exporter.wait_for(lambda t: "GPU_TEMP" in t)).of("DCGM_FI_DEV_GPU_TEMP")[0]
    assert sample.labels[key] == "gpu-node-7"
    assert ({"hostname", "Hostname"} - {key}).isdisjoint(sample.labels)


def test_no_host_label(run_exporter: Callable[..., Exporter]) -> None:
    exporter = run_exporter("--hostname-label", "none")
    sample = parse(exporter.wait_for(lambda t: "GPU_TEMP" in t)).of("DCGM_FI_DEV_GPU_TEMP")[0]
    assert "hostname" not in sample.labels and "Hostname" not in sample.labels


def test_other_paths_are_404_and_sigterm_exits_0(run_exporter: Callable[..., Exporter]) -> None:
    exporter = run_exporter()
    assert get(exporter.url + "/nope")[0] == 404
    assert get(exporter.url + "/health") == (200, "ok\n")
    exporter.proc.terminate()
    assert exporter.proc.wait(timeout=30) == 0
