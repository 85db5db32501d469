"""Settings: defaults, env twins, the flag winning, and bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_protocol.settings import check_declaration, markdown_table, options_table
from nvml_mock_topology.errors import ConfigError
from nvml_mock_topology.settings import OPTIONS, Settings, parse_settings


def test_defaults() -> None:
    settings = parse_settings([], {})
    assert settings == Settings()
    assert settings.topology_file == Path("/etc/nvml-mock/topology/topology.yaml")
    assert (settings.host, settings.port) == ("0.0.0.0", 8090)
    assert settings.max_watch_seconds == 60
    assert settings.allow_empty is False


def test_env_twins_and_flag_wins() -> None:
    env = {
        "NVML_MOCK_TOPOLOGY_FILE": "/env/topology.yaml",
        "NVML_MOCK_TOPOLOGY_HOST": "127.0.0.1",
        "NVML_MOCK_TOPOLOGY_PORT": "9000",
        "NVML_MOCK_TOPOLOGY_ALLOW_EMPTY": "yes",
        "NVML_MOCK_TOPOLOGY_MAX_WATCH": "30",
        "NVML_MOCK_TOPOLOGY_POLL_INTERVAL": "0.5",
        "NVML_MOCK_TOPOLOGY_ACCESS_LOG": "on",
        "NVML_MOCK_LOG_FORMAT": "JSON",
        "NVML_MOCK_LOG_LEVEL": "debug",
    }
    from_env = parse_settings([], env)
    assert from_env == Settings(
        topology_file=Path("/env/topology.yaml"),
        host="127.0.0.1",
        port=9000,
        allow_empty=True,
        max_watch_seconds=30,
        poll_interval=0.5,
        access_log=True,
        log_format="json",
        log_level="debug",
    )
    flags = parse_settings(
        ["--topology-file", "/flag.yaml", "--port", "9100", "--max-watch-seconds", "5"], env
    )
    assert (flags.topology_file, flags.port, flags.max_watch_seconds) == (
        Path("/flag.yaml"),
        9100,
        5,
    )


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"NVML_MOCK_TOPOLOGY_PORT": "http"}, "NVML_MOCK_TOPOLOGY_PORT='http' is not a port"),
        (["--port", "70000"], {}, "--port='70000' is outside 0..65535"),
        ([], {"NVML_MOCK_TOPOLOGY_ALLOW_EMPTY": "maybe"}, "NVML_MOCK_TOPOLOGY_ALLOW_EMPTY='maybe'"),
        (["--max-watch-seconds", "0"], {}, "--max-watch-seconds='0' must be above 0"),
        (["--max-watch-seconds", "nan"], {}, "--max-watch-seconds='nan'"),
        (["--poll-interval", "-1"], {}, "--poll-interval='-1'"),
        (
            [],
            {"NVML_MOCK_LOG_FORMAT": "xml"},
            "NVML_MOCK_LOG_FORMAT='xml' must be one of text, json",
        ),
        (["--log-level", "loud"], {}, "--log-level='loud'"),
        (["--topology-file", ""], {}, "--topology-file='' is empty"),
    ],
)
def test_bad_values_name_key_and_value(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(argv, env)
    assert message in str(caught.value)


def test_settings_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Settings().port = 1  # type: ignore[misc]


def test_an_empty_env_value_counts_as_unset() -> None:
    env = {"NVML_MOCK_TOPOLOGY_FILE": "", "NVML_MOCK_TOPOLOGY_PORT": "", "NVML_MOCK_LOG_LEVEL": " "}
    assert parse_settings([], env) == Settings()


def test_the_readme_table_is_the_declaration() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_table(readme) == options_table(OPTIONS, Settings())
    assert check_declaration(Settings, OPTIONS) == []
