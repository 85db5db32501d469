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
    assert (settings.max_file_bytes, settings.max_document_items) == (8 * 1024 * 1024, 1_000_000)
    assert (settings.header_timeout, settings.keep_alive_timeout) == (10, 5)
    assert settings.max_connections == 32768


def test_env_twins_and_flag_wins() -> None:
    env = {
        "NVML_MOCK_TOPOLOGY_FILE": "/env/topology.yaml",
        "NVML_MOCK_TOPOLOGY_HOST": "127.0.0.1",
        "NVML_MOCK_TOPOLOGY_PORT": "9000",
        "NVML_MOCK_TOPOLOGY_ALLOW_EMPTY": "yes",
        "NVML_MOCK_TOPOLOGY_MAX_WATCH": "30",
        "NVML_MOCK_TOPOLOGY_POLL_INTERVAL": "0.5",
        "NVML_MOCK_TOPOLOGY_ACCESS_LOG": "on",
        "NVML_MOCK_TOPOLOGY_MAX_FILE_SIZE": "1048576",
        "NVML_MOCK_TOPOLOGY_MAX_DOCUMENT_ITEMS": "200_000",
        "NVML_MOCK_TOPOLOGY_HEADER_TIMEOUT": "2.5",
        "NVML_MOCK_TOPOLOGY_KEEP_ALIVE_TIMEOUT": "30",
        "NVML_MOCK_TOPOLOGY_MAX_CONNECTIONS": "20000",
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
        max_file_bytes=1048576,
        max_document_items=200_000,
        header_timeout=2.5,
        keep_alive_timeout=30,
        max_connections=20000,
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
    limits = parse_settings(
        [
            "--max-file-size",
            "4096",
            "--max-document-items",
            "10",
            "--header-timeout",
            "1",
            "--keep-alive-timeout",
            "2",
            "--max-connections",
            "3",
        ],
        env,
    )
    assert (
        limits.max_file_bytes,
        limits.max_document_items,
        limits.header_timeout,
        limits.keep_alive_timeout,
        limits.max_connections,
    ) == (4096, 10, 1, 2, 3)


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
        (["--max-file-size", "8M"], {}, "--max-file-size='8M' is not a whole number"),
        (["--max-file-size", "0"], {}, "--max-file-size='0' must be between 1 and"),
        ([], {"NVML_MOCK_TOPOLOGY_MAX_DOCUMENT_ITEMS": "-5"}, "ITEMS='-5' must be between 1"),
        (["--header-timeout", "0"], {}, "--header-timeout='0' must be above 0"),
        ([], {"NVML_MOCK_TOPOLOGY_KEEP_ALIVE_TIMEOUT": "inf"}, "KEEP_ALIVE_TIMEOUT='inf'"),
        (["--max-connections", "lots"], {}, "--max-connections='lots' is not a whole number"),
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
