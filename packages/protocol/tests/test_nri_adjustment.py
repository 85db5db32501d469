"""containerd's rules for combining several plugins' adjustments."""

from __future__ import annotations

import pytest
from nvml_mock_protocol.nri import AdjustmentConflictError, AdjustmentMerger
from nvml_mock_protocol.nri import api_pb2 as api


def base() -> api.Container:
    container = api.Container(
        id="c",
        env=["PATH=/usr/bin", "HOME=/root"],
        annotations={"a": "1"},
        mounts=[api.Mount(destination="/etc/hosts", source="/h")],
    )
    container.linux.devices.add(path="/dev/null", type="c", major=1, minor=3)
    return container


def test_env_is_replaced_in_place_and_new_keys_appended() -> None:
    merger = AdjustmentMerger(base())
    merger.apply(
        "10-a",
        api.ContainerAdjustment(
            env=[
                api.KeyValue(key="PATH", value="/opt/bin:/usr/bin"),
                api.KeyValue(key="X", value="1"),
            ]
        ),
    )
    assert list(merger.container.env) == ["PATH=/opt/bin:/usr/bin", "HOME=/root", "X=1"]
    assert [kv.key for kv in merger.adjustment.env] == ["PATH", "X"]


def test_input_container_is_not_modified() -> None:
    original = base()
    AdjustmentMerger(original).apply(
        "10-a", api.ContainerAdjustment(env=[api.KeyValue(key="X", value="1")])
    )
    assert list(original.env) == ["PATH=/usr/bin", "HOME=/root"]


def test_removal_markers() -> None:
    merger = AdjustmentMerger(base())
    adjust = api.ContainerAdjustment(
        env=[api.KeyValue(key="-HOME")],
        annotations={"-a": ""},
        mounts=[api.Mount(destination="-/etc/hosts")],
    )
    adjust.linux.devices.add(path="-/dev/null")
    merger.apply("10-a", adjust)
    assert list(merger.container.env) == ["PATH=/usr/bin"]
    assert dict(merger.container.annotations) == {}
    assert list(merger.container.mounts) == []
    assert list(merger.container.linux.devices) == []


def test_mount_with_same_destination_is_replaced() -> None:
    merger = AdjustmentMerger(base())
    merger.apply(
        "10-a",
        api.ContainerAdjustment(mounts=[api.Mount(destination="/etc/hosts", source="/other")]),
    )
    assert [(m.destination, m.source) for m in merger.container.mounts] == [
        ("/etc/hosts", "/other")
    ]


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (
            api.ContainerAdjustment(env=[api.KeyValue(key="FOO", value="1")]),
            api.ContainerAdjustment(env=[api.KeyValue(key="FOO", value="2")]),
            'plugins "20-b" and "10-a" both tried to set Env FOO',
        ),
        (
            api.ContainerAdjustment(annotations={"k": "1"}),
            api.ContainerAdjustment(annotations={"k": "2"}),
            'plugins "20-b" and "10-a" both tried to set Annotations k',
        ),
        (
            api.ContainerAdjustment(CDI_devices=[api.CDIDevice(name="v.com/gpu=all")]),
            api.ContainerAdjustment(CDI_devices=[api.CDIDevice(name="v.com/gpu=all")]),
            'plugins "20-b" and "10-a" both tried to set CdiDevices v.com/gpu=all',
        ),
        (
            api.ContainerAdjustment(env=[api.KeyValue(key="FOO", value="1")]),
            api.ContainerAdjustment(env=[api.KeyValue(key="-FOO")]),
            'plugins "20-b" and "10-a" both tried to set Env FOO',
        ),
    ],
)
def test_second_plugin_touching_an_owned_entry_conflicts(
    first: api.ContainerAdjustment, second: api.ContainerAdjustment, message: str
) -> None:
    merger = AdjustmentMerger(base())
    merger.apply("10-a", first)
    with pytest.raises(AdjustmentConflictError) as info:
        merger.apply("20-b", second)
    assert str(info.value) == message


def test_a_plugin_may_remove_and_set_an_unowned_entry_in_one_adjustment() -> None:
    merger = AdjustmentMerger(base())
    merger.apply(
        "10-a",
        api.ContainerAdjustment(
            env=[api.KeyValue(key="HOME", value="/home/x"), api.KeyValue(key="-HOME")]
        ),
    )
    assert list(merger.container.env) == ["PATH=/usr/bin", "HOME=/home/x"]


def test_hooks_accumulate_without_conflict() -> None:
    merger = AdjustmentMerger(base())
    for plugin in ("10-a", "20-b"):
        adjust = api.ContainerAdjustment()
        adjust.hooks.prestart.add(path=f"/bin/{plugin}")
        merger.apply(plugin, adjust)
    assert [h.path for h in merger.container.hooks.prestart] == ["/bin/10-a", "/bin/20-b"]


def test_cdi_devices_rlimits_and_args() -> None:
    merger = AdjustmentMerger(base())
    merger.apply(
        "10-a",
        api.ContainerAdjustment(
            CDI_devices=[api.CDIDevice(name="nvml-mock.nvidia.com/gpu=all")],
            rlimits=[api.POSIXRlimit(type="RLIMIT_NOFILE", hard=1024, soft=512)],
            args=["", "sleep", "1"],
        ),
    )
    assert [d.name for d in merger.container.CDI_devices] == ["nvml-mock.nvidia.com/gpu=all"]
    assert [(r.type, r.hard) for r in merger.container.rlimits] == [("RLIMIT_NOFILE", 1024)]
    assert list(merger.container.args) == ["sleep", "1"]


def test_created_allows_plugin_added_devices_in_the_device_cgroup() -> None:
    merger = AdjustmentMerger(base())
    adjust = api.ContainerAdjustment()
    adjust.linux.devices.add(
        path="/dev/nvidia-caps-imex-channels/channel1", type="c", major=242, minor=1
    )
    adjust.linux.devices.add(path="/dev/loop9", type="b", major=7, minor=9)
    merger.apply("10-a", adjust)
    rules = [
        (r.allow, r.type, r.major.value, r.minor.value, r.access)
        for r in merger.created().linux.resources.devices
    ]
    assert rules == [(True, "c", 242, 1, "rw"), (True, "b", 7, 9, "rwm")], (
        "one allow rule per added device; /dev/null was the container's own"
    )
    assert len(merger.created().linux.resources.devices) == 2, "idempotent"
