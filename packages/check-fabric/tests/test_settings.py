"""Flags, their env twins, validation naming key and value, and the usage-error exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from check_fabric import main
from check_fabric.errors import ConfigError, UsageError
from check_fabric.settings import OPTIONS, Settings, load_settings
from nvml_mock_protocol.settings import check_declaration, markdown_table, options_table

URL = "http://topo.example:8090"


def test_defaults() -> None:
    assert load_settings([], {}) == Settings()


def test_env_twins() -> None:
    env = {
        "CHECK_FABRIC_JSON": "yes",
        "CHECK_FABRIC_EXPECT_CLIQUE": "3",
        "CHECK_FABRIC_EXPECT_CLUSTER_UUID": "00000000-0000-0000-0000-0000000000CD",
        "CHECK_FABRIC_REQUIRE_COMPLETED": "1",
        "CHECK_FABRIC_TOPOLOGY_URL": URL + "/",
        "CHECK_FABRIC_TOPOLOGY_TIMEOUT": "2.5",
        "NODE_NAME": "worker-1",
        "NVML_MOCK_LOG_FORMAT": "JSON",
        "NVML_MOCK_LOG_LEVEL": "debug",
    }
    assert load_settings([], env) == Settings(
        json=True,
        expect_clique=3,
        expect_cluster_uuid="00000000-0000-0000-0000-0000000000cd",
        require_completed=True,
        topology_url=URL,
        node_name="worker-1",
        topology_timeout=2.5,
        log_format="json",
        log_level="debug",
    )


def test_flags_win_over_env() -> None:
    env = {
        "CHECK_FABRIC_JSON": "true",
        "CHECK_FABRIC_EXPECT_CLIQUE": "3",
        "CHECK_FABRIC_TOPOLOGY_URL": "http://other:1",
        "NODE_NAME": "from-env",
    }
    argv = ["--no-json", "--expect-clique", "0", "--topology-url", URL, "--node-name", "w2"]
    settings = load_settings(argv, env)
    assert settings.json is False
    assert settings.expect_clique == 0
    assert (settings.topology_url, settings.node_name) == (URL, "w2")


@pytest.mark.parametrize(
    ("argv", "env", "key", "reason"),
    [
        (["--expect-clique", "one"], {}, "--expect-clique", "decimal cliqueId"),
        (["--expect-clique", "-1"], {}, "--expect-clique", "uint32"),
        ([], {"CHECK_FABRIC_EXPECT_CLIQUE": "4294967296"}, "CHECK_FABRIC_EXPECT_CLIQUE", "uint32"),
        (["--expect-cluster-uuid", "cd"], {}, "--expect-cluster-uuid", "expected a UUID"),
        ([], {"CHECK_FABRIC_JSON": "maybe"}, "CHECK_FABRIC_JSON", "1/true/yes/on"),
        (["--topology-url", "topo:8090"], {"NODE_NAME": "w"}, "--topology-url", "http://"),
        (["--topology-url", "ftp://h"], {"NODE_NAME": "w"}, "--topology-url", "http://"),
        (["--topology-url", URL], {}, "NODE_NAME", "node name is required"),
        (["--topology-url", URL, "--node-name", " "], {}, "--node-name", "node name is required"),
        (["--topology-timeout", "0"], {}, "--topology-timeout", "more than 0"),
        (["--topology-timeout", "soon"], {}, "--topology-timeout", "number of seconds"),
        (["--log-format", "xml"], {}, "--log-format", "text, json"),
        ([], {"NVML_MOCK_LOG_LEVEL": "loud"}, "NVML_MOCK_LOG_LEVEL", "debug, info"),
    ],
)
def test_bad_values_name_key_and_value(
    argv: list[str], env: dict[str, str], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(argv, env)
    assert info.value.key == key
    assert reason in info.value.reason
    assert str(info.value).startswith(f"invalid {key}=")


def test_unknown_flag_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --frobnicate"):
        load_settings(["--frobnicate"], {})


def test_usage_and_config_errors_exit_1_not_argparse_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--frobnicate"]) == 1
    assert (
        "check-fabric: usage error: unrecognized arguments: --frobnicate" in capsys.readouterr().err
    )
    assert main(["--expect-clique", "x"]) == 1
    assert capsys.readouterr().err == (
        "check-fabric: config error: invalid --expect-clique='x': expected a decimal cliqueId\n"
    )


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "exit codes: 0 all good" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("check-fabric 0.")


def test_a_bad_command_line_with_json_asked_for_answers_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--json", "--topology-url", "nope"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["exitCode"]) == ("error", 1)
    assert doc["error"]["kind"] == "config"
    assert (doc["error"]["key"], doc["error"]["value"]) == ("--topology-url", "nope")
    assert main(["--bogus", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"


def test_the_readme_table_is_the_declaration() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_table(readme) == options_table(OPTIONS, Settings())
    assert check_declaration(Settings, OPTIONS) == []


def test_help_names_every_env_twin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for option in OPTIONS:
        assert f"env {option.env};" in out, option.flag
    assert "(env CHECK_FABRIC_TOPOLOGY_TIMEOUT; default 5)" in out
