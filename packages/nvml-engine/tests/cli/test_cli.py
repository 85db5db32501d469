"""The nvml-mock-engine command: subcommands, env twins, exit codes and log formats."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_mock_engine.cli import main
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from nvml_mock_engine.settings import (
    LOG_OPTIONS,
    NODE_OPTIONS,
    RENDER_OPTIONS,
    STAGE_OPTIONS,
    RenderSettings,
    StageSettings,
    options_table,
)
from nvml_mock_protocol.settings import check_declaration, markdown_table

ENGINE_ENV = (
    "NVML_MOCK_PROFILE",
    "NVML_MOCK_GPU_COUNT",
    "NVML_MOCK_ENGINE_CONFIG",
    "NVML_MOCK_DRIVER_VERSION",
    "NVML_MOCK_LOG_FORMAT",
    "NVML_MOCK_LOG_LEVEL",
    "NODE_NAME",
    "NVML_MOCK_OVERLAY_MOUNT_PATH",
    "NVML_MOCK_OVERLAY_HOST_PATH",
)


@pytest.fixture(autouse=True)
def engine_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENGINE_ENV:
        monkeypatch.delenv(name, raising=False)


def test_render_to_file(tmp_path: Path) -> None:
    out = tmp_path / "state.nvmlmock"
    code = main(["render", "--profile", "gb200", "--count", "8", "--node", "n7", "-o", str(out)])
    assert code == 0
    assert out.read_text() == render_text(resolve_config(profile="gb200", count=8, node="n7"))


def test_render_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--profile", "t4", "--node", "n"]) == 0
    out = capsys.readouterr().out
    assert out == render_text(resolve_config(profile="t4", node="n"))


def test_env_twins_and_flag_precedence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NVML_MOCK_PROFILE", "l40s")
    monkeypatch.setenv("NVML_MOCK_GPU_COUNT", "3")
    monkeypatch.setenv("NODE_NAME", "from-env")
    monkeypatch.setenv("NVML_MOCK_DRIVER_VERSION", "570.148.08")
    assert main(["render"]) == 0
    expected = resolve_config(profile="l40s", count=3, node="from-env", driver_version="570.148.08")
    assert capsys.readouterr().out == render_text(expected)
    assert main(["render", "--profile", "h100", "--count", "2"]) == 0
    expected = resolve_config(profile="h100", count=2, node="from-env", driver_version="570.148.08")
    assert capsys.readouterr().out == render_text(expected)


def test_empty_env_values_count_as_unset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("NVML_MOCK_PROFILE", "NVML_MOCK_GPU_COUNT", "NVML_MOCK_DRIVER_VERSION"):
        monkeypatch.setenv(name, "")
    assert main(["render", "--profile", "gb200", "--node", "n"]) == 0
    assert capsys.readouterr().out == render_text(resolve_config(profile="gb200", node="n"))


def test_config_file_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("profile: gb300\ncount: 2\nnode: rack-9\nfabric: {clique_id: 32766}\n")
    assert main(["render", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "profile=gb300" in out and "device_count=2" in out and "fabric_clique_id=32766" in out


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["render", "--count", "0"], {}, "count: must be an integer in 1..64, got 0"),
        (
            ["render"],
            {"NVML_MOCK_GPU_COUNT": "eight"},
            "count: must be an integer in 1..64, got 'eight'",
        ),
        (["render", "--profile", "k80"], {}, "profile: unknown profile 'k80'"),
        (["render", "--config", "/nonexistent/node.yaml"], {}, "config: cannot read"),
    ],
)
def test_bad_config_exits_3_naming_the_key(
    argv: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "state"
    assert main([*argv, "-o", str(out)]) == 3
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_override_error_names_the_gpu_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("profile: h100\ngpus:\n  3: {memory_total_bytes: 0}\n")
    assert main(["render", "--config", str(config)]) == 3
    assert (
        "gpus[3].memory_total_bytes: must be a positive integer, got 0" in capsys.readouterr().err
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["render", "--frobnicate"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_json_logs_one_object_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s"
    assert (
        main(["--log-format", "json", "render", "--profile", "a100", "--node", "n", "-o", str(out)])
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines and lines[-1]["level"] == "info" and lines[-1]["logger"] == "nvml_mock_engine.cli"
    assert str(out) in lines[-1]["msg"]


def test_log_options_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["render", "--profile", "a100", "-o", str(tmp_path / "s"), "--log-level", "warning"])
        == 0
    )
    assert capsys.readouterr().err == ""


def test_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["profile"] for r in rows] == [
        "a100",
        "b200",
        "gb200",
        "gb300",
        "h100",
        "h200",
        "l40s",
        "t4",
    ]
    gb200 = rows[2]
    assert gb200 == {
        "profile": "gb200",
        "name": "NVIDIA GB200",
        "gpus": 4,
        "memory_mib": 189471,
        "architecture": "blackwell",
        "compute_capability": "10.0",
        "nvlinks": 18,
        "fabric": True,
        "driver": "580.173.02",
    }


def test_lib_path_prints_the_built_library(
    capsys: pytest.CaptureFixture[str], library: Path
) -> None:
    assert main(["lib-path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == library


def test_lib_path_without_the_library_exits_1_naming_the_fix(tmp_path: Path) -> None:
    import nvml_mock_engine

    package = Path(nvml_mock_engine.__file__).parent
    shutil.copytree(package, tmp_path / package.name, ignore=shutil.ignore_patterns("_lib"))
    done = subprocess.run(
        [sys.executable, "-m", "nvml_mock_engine", "lib-path"],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "not built" in done.stderr and "make -C packages/nvml-engine/native" in done.stderr


def test_stage_command_and_stage_error_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data").write_text("keep me")
    assert main(["stage", str(foreign), "--profile", "t4", "--no-devices"]) == 1
    assert "was not staged by nvml-mock-engine" in capsys.readouterr().err
    assert (foreign / "data").read_text() == "keep me"


def test_stage_command_builds_then_reuses_the_runtime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], library: Path
) -> None:
    overlay = tmp_path / "overlay"
    argv = ["stage", str(overlay), "--profile", "gb200", "--node", "n", "--no-devices"]
    assert main(argv) == 0
    assert "runtime built" in capsys.readouterr().err
    assert main([*argv, "--count", "2"]) == 0
    assert "runtime reused" in capsys.readouterr().err
    assert "device_count=2" in (overlay / "config" / "state.nvmlmock").read_text()
    assert os.access(overlay / "bin" / "nvidia-smi", os.X_OK)
    assert main([*argv, "--host-path", "/var/lib/nvml-mock"]) == 0
    spec = (overlay / "cdi" / "nvml-mock.yaml").read_text()
    assert "hostPath" not in spec  # --no-devices: nothing on the host to point at


def test_stage_refuses_device_nodes_on_a_real_gpu_node_and_exits_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    library: Path,
) -> None:
    proc = tmp_path / "host" / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text("NVRM version: NVIDIA UNIX Kernel Module\n")
    (proc / "devices").write_text("Character devices:\n195 nvidia\n")
    monkeypatch.setenv("NVML_MOCK_HOST_PROC_ROOT", str(proc))
    overlay = tmp_path / "overlay"
    assert main(["stage", str(overlay), "--profile", "t4", "--node", "n"]) == 1
    err = capsys.readouterr().err
    assert "mock device nodes refused: a real NVIDIA driver is loaded on this node" in err
    assert os.access(overlay / "bin" / "nvidia-smi", os.X_OK), "the rest is staged"
    assert list((overlay / "dev").iterdir()) == []


def test_stage_mount_path_from_env_and_flag(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    library: Path,
) -> None:
    overlay = tmp_path / "overlay"
    argv = ["stage", str(overlay), "--profile", "t4", "--node", "n", "--no-devices"]
    launcher = overlay / "bin" / "nvidia-smi"
    assert main(argv) == 0
    assert "${NVML_MOCK_OVERLAY_MOUNT_PATH:-/opt/nvml-mock}" in launcher.read_text()
    monkeypatch.setenv("NVML_MOCK_OVERLAY_MOUNT_PATH", "/from/env")
    assert main(argv) == 0
    assert "${NVML_MOCK_OVERLAY_MOUNT_PATH:-/from/env}" in launcher.read_text()
    assert main([*argv, "--mount-path", "/from/flag"]) == 0
    assert "${NVML_MOCK_OVERLAY_MOUNT_PATH:-/from/flag}" in launcher.read_text()


def test_python_dash_m_runs_the_same_main(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENGINE_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "nvml_mock_engine", "render", "--profile", "h200", "--node", "x"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == render_text(resolve_config(profile="h200", node="x"))
    version = subprocess.run(
        [sys.executable, "-m", "nvml_mock_engine", "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert version.stdout.startswith("nvml-mock-engine ")


def test_the_readme_table_is_the_declaration() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    assert markdown_table(readme) == options_table()
    for cls, options in (
        (RenderSettings, NODE_OPTIONS + RENDER_OPTIONS + LOG_OPTIONS),
        (StageSettings, NODE_OPTIONS + STAGE_OPTIONS + LOG_OPTIONS),
    ):
        assert check_declaration(cls, options) == []


def test_bad_log_values_exit_3_naming_flag_or_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--log-level", "loud", "lib-path"]) == 3
    assert "log_level: must be one of debug, info, warning, error, got 'loud' (--log-level)" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("NVML_MOCK_LOG_FORMAT", "xml")
    assert main(["lib-path"]) == 3
    assert "log_format: must be one of text, json, got 'xml' (NVML_MOCK_LOG_FORMAT)" in (
        capsys.readouterr().err
    )


def test_help_names_each_env_twin_and_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no line breaks inside a path
    with pytest.raises(SystemExit):
        main(["stage", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(env NVML_MOCK_GPU_COUNT; default the profile's GPUs per node)" in out
    assert "(env NVML_MOCK_OVERLAY_MOUNT_PATH; default /opt/nvml-mock)" in out
