"""The IMEX channel values: rendered into the stager's env twins, refused by the schema when bad.

The stager passes every env var it does not turn into a flag on to ``nvml-mock-engine stage``,
so ``NVML_MOCK_IMEX_CHANNELS`` and ``NVML_MOCK_IMEX_MAJOR`` on its container are what the
engine stages with.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from conftest import NAMESPACE, RenderFn
from manifests import container, env_of


def _stage_env(render: RenderFn, values: dict[str, Any] | None = None) -> dict[str, Any]:
    return env_of(container(render(values).get("DaemonSet", "nvml-mock"), "stage"))


def test_channels_are_off_by_default(render: RenderFn, chart: helm.Chart) -> None:
    assert chart.values["imex"] == {"channels": {"enabled": False, "count": 8, "major": ""}}
    env = _stage_env(render)
    # 0, not unset: the engine's own default is 8 channels.
    assert env["NVML_MOCK_IMEX_CHANNELS"] == "0"
    assert "NVML_MOCK_IMEX_MAJOR" not in env


def test_enabled_channels_reach_the_stager(render: RenderFn) -> None:
    env = _stage_env(render, {"imex": {"channels": {"enabled": True}}})
    assert env["NVML_MOCK_IMEX_CHANNELS"] == "8"
    # Unset rather than empty: the engine chooses the major at staging.
    assert "NVML_MOCK_IMEX_MAJOR" not in env

    env = _stage_env(render, {"imex": {"channels": {"enabled": True, "count": 64, "major": 243}}})
    assert (env["NVML_MOCK_IMEX_CHANNELS"], env["NVML_MOCK_IMEX_MAJOR"]) == ("64", "243")


def test_a_major_without_channels_stages_nothing(render: RenderFn) -> None:
    env = _stage_env(render, {"imex": {"channels": {"enabled": False, "count": 16, "major": 240}}})
    assert env["NVML_MOCK_IMEX_CHANNELS"] == "0"
    assert "NVML_MOCK_IMEX_MAJOR" not in env


@pytest.mark.parametrize(
    ("channels", "needle"),
    [
        ({"count": 0}, "count"),
        ({"count": 2049}, "count"),
        ({"count": "8"}, "count"),
        ({"count": 1.5}, "count"),
        ({"major": 239}, "major"),
        ({"major": 255}, "major"),
        ({"major": 195}, "major"),
        ({"major": "241"}, "major"),
        ({"major": "auto"}, "major"),
        ({"enabled": "yes"}, "enabled"),
        ({"channelCount": 8}, "channelCount"),
    ],
)
def test_schema_refuses_bad_channel_values(
    chart: helm.Chart, channels: dict[str, Any], needle: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render({"imex": {"channels": channels}}, name="nvml-mock", namespace=NAMESPACE)
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    "imex", [{"enabled": True}, {"mockChannels": {"enabled": True}}, {"stateDir": "/x"}]
)
def test_the_reference_charts_imex_fakes_are_refused(
    chart: helm.Chart, imex: dict[str, Any]
) -> None:
    """Its IMEX daemon fakes are not part of this project: refused, not silently ignored."""
    with pytest.raises(helm.HelmValuesError):
        chart.render({"imex": imex}, name="nvml-mock", namespace=NAMESPACE)


def test_notes_name_the_annotation_when_channels_are_on(render: RenderFn) -> None:
    assert "imex-channels" not in render().notes
    notes = render({"imex": {"channels": {"enabled": True, "count": 4}}}).notes
    assert 'nvml-mock.nvidia.com/imex-channels: "true"   (4 per node' in notes
    assert "/var/lib/nvml-mock/imex/proc-devices" in notes
