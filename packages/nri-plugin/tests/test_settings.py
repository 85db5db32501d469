"""Settings: flags, env twins, precedence, validation and runtime-sent config."""

from __future__ import annotations

import pytest
from nvml_mock_nri.errors import ConfigError
from nvml_mock_nri.settings import (
    OPTIONS,
    Settings,
    apply_runtime_config,
    load_settings,
    normalize_path,
)


def test_defaults_are_the_reference_names() -> None:
    settings = load_settings([], {})
    assert settings.socket_path == "/var/run/nri/nri.sock"
    assert (settings.plugin_name, settings.plugin_index) == ("nvml-mock", "10")
    assert settings.health_endpoint == ("0.0.0.0", 8080)
    assert settings.overlay_host_path == "/var/lib/nvml-mock"
    assert settings.overlay_mount_path == "/opt/nvml-mock"
    assert settings.effective_device_host_path == "/var/lib/nvml-mock/dev"
    assert settings.device_injection_mode == "raw"
    assert settings.all_excluded_namespaces == {"kube-system"}
    assert settings.explicit == frozenset()


def test_flag_wins_over_env_and_empty_env_is_unset() -> None:
    env = {"NRI_PLUGIN_INDEX": "20", "NVML_MOCK_OVERLAY_HOST_PATH": "", "NODE_NAME": "n1"}
    settings = load_settings(["--plugin-index", "30"], env)
    assert settings.plugin_index == "30"
    assert settings.overlay_host_path == "/var/lib/nvml-mock"
    assert settings.node_name == "n1"
    assert settings.explicit == {"plugin_index", "node_name"}


def test_every_option_has_a_flag_and_an_env_twin() -> None:
    fields = {option.field for option in OPTIONS}
    assert len(fields) == len(OPTIONS)
    assert len({option.env for option in OPTIONS}) == len(OPTIONS)
    for option in OPTIONS:
        assert hasattr(Settings(), option.field)
        assert option.flag == "--" + option.field.replace("_", "-")


def test_excluded_namespaces_always_hold_kube_system_and_release() -> None:
    settings = load_settings(
        ["--excluded-namespaces", " a, b ,,a", "--release-namespace", "nvml-mock"], {}
    )
    assert settings.excluded_namespaces == ("a", "b")
    assert settings.all_excluded_namespaces == {"kube-system", "a", "b", "nvml-mock"}


@pytest.mark.parametrize(
    ("argv", "env", "key"),
    [
        (["--plugin-index", "7"], {}, "--plugin-index"),
        (["--plugin-name", "bad name"], {}, "--plugin-name"),
        ([], {"NVML_MOCK_DEVICE_INJECTION_MODE": "oci"}, "NVML_MOCK_DEVICE_INJECTION_MODE"),
        (["--health-addr", "8080"], {}, "--health-addr"),
        (["--health-addr", ":99999"], {}, "--health-addr"),
        (["--overlay-host-path", "relative/dir"], {}, "--overlay-host-path"),
        (["--topology-url", "ftp://x"], {"NODE_NAME": "n"}, "--topology-url"),
        (["--topology-url", "http://topo:8090"], {}, "NODE_NAME"),
        (["--topology-watch-seconds", "0"], {}, "--topology-watch-seconds"),
        (["--wedge-threshold", "-1"], {}, "--wedge-threshold"),
        ([], {"NVML_MOCK_RUNTIME_REQUEST_TIMEOUT": "soon"}, "NVML_MOCK_RUNTIME_REQUEST_TIMEOUT"),
        (["--topology-timeout", "nan"], {}, "--topology-timeout"),
        (["--cdi-device-name", "gpu"], {}, "--cdi-device-name"),
        ([], {"NVML_MOCK_LOG_LEVEL": "loud"}, "NVML_MOCK_LOG_LEVEL"),
    ],
)
def test_bad_values_name_key_and_value(argv: list[str], env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(argv, env)
    assert info.value.key == key
    assert key in str(info.value)


def test_unknown_flag_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        load_settings(["--no-such-flag"], {})
    assert info.value.code == 2


def test_runtime_config_applies_where_no_flag_or_env_set_the_option() -> None:
    settings = load_settings(["--device-injection-mode", "raw"], {})
    text = "deviceInjectionMode: cdi\nexcludedNamespaces: [ci, scratch]\nreleaseNamespace: gpu\n"
    updated, ignored = apply_runtime_config(settings, text)
    assert ignored == ["deviceInjectionMode"]
    assert updated.device_injection_mode == "raw"
    assert updated.excluded_namespaces == ("ci", "scratch")
    assert "gpu" in updated.all_excluded_namespaces


@pytest.mark.parametrize("text", ["", "   \n", "# nothing\n", "~\n"])
def test_empty_runtime_config_changes_nothing(text: str) -> None:
    settings = load_settings([], {})
    assert apply_runtime_config(settings, text) == (settings, [])


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("deviceInjectionMode: oci", "config.deviceInjectionMode"),
        ("nodeName: other", "config.nodeName"),
        ("[a, b]", "config"),
        ("key: [unclosed", "config"),
        ("overlayMountPath: {a: 1}", "config.overlayMountPath"),
    ],
)
def test_bad_runtime_config_names_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_runtime_config(load_settings([], {}), text)
    assert info.value.key == key


def test_timeouts_from_flags_and_env() -> None:
    settings = load_settings([], {})
    assert (settings.runtime_request_timeout, settings.wedge_threshold) == (2.0, 0.0)
    env = {"NVML_MOCK_RUNTIME_REQUEST_TIMEOUT": "10", "NVML_MOCK_WEDGE_THRESHOLD": "15"}
    settings = load_settings([], env)
    assert (settings.runtime_request_timeout, settings.wedge_threshold) == (10.0, 15.0)
    assert load_settings(["--wedge-threshold", ""], {}).wedge_threshold == 0.0, "empty: derived"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/opt//nvml-mock", "/opt/nvml-mock"),
        ("/opt/nvml-mock/", "/opt/nvml-mock"),
        ("//opt/./nvml-mock/.", "/opt/nvml-mock"),
        ("/opt/a/../nvml-mock", "/opt/nvml-mock"),
        ("/", "/"),
        ("//", "/"),
    ],
)
def test_paths_are_normalised(given: str, expected: str) -> None:
    assert normalize_path(given) == expected
    assert load_settings(["--overlay-mount-path", given], {}).overlay_mount_path == expected
