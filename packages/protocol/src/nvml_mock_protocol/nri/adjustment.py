"""How a runtime combines the adjustments of several plugins into one container.

Used by the runtime test double so that tests see what containerd would
create. The rules follow containerd's NRI adaptation: plugins run in index
order and each sees the container as the previous ones left it; every
adjusted entry (annotation key, mount destination, env name, device path,
CDI device, rlimit type, args) is owned by the plugin that set it, and a
second plugin setting an owned entry fails the whole creation. A leading
``-`` on a key, destination or path removes the entry and releases it, so a
plugin may take an entry over by removing and setting it in one adjustment.
Hooks accumulate without conflict. Resource adjustments are merged without
ownership tracking (nvml-mock does not adjust resources).

When the runtime turns the result into the OCI spec, every device a plugin added
also gets a device cgroup rule that allows it (containerd's NRI spec generator
does this; an adjustment's own ``resources.devices`` rules are not carried over by
its adaptation). :func:`allow_rule` is that rule, and :meth:`AdjustmentMerger.created`
the container with the rules in ``linux.resources.devices``, as the container would
be created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import AdjustmentConflictError

_Entry = TypeVar("_Entry", bound=Message)


def removal_target(key: str) -> str | None:
    """The key a removal marker (``-KEY``) names, or ``None`` for a plain key."""
    return key[1:] if key.startswith("-") else None


def allow_rule(device: api.LinuxDevice) -> api.LinuxDeviceCgroup:
    """The device cgroup rule the runtime adds for a device a plugin added.

    The access is ``rw`` (``rwm`` for a block device) whatever the node's file mode, as
    containerd's NRI generator writes it.
    """
    rule = api.LinuxDeviceCgroup(
        allow=True, type=device.type, access="rwm" if device.type == "b" else "rw"
    )
    rule.major.value = device.major
    rule.minor.value = device.minor
    return rule


class AdjustmentMerger:
    """Applies plugin adjustments one after another to a copy of a container."""

    def __init__(self, container: api.Container) -> None:
        self.container = api.Container()
        self.container.CopyFrom(container)
        self.adjustment = api.ContainerAdjustment()
        """Everything applied so far, as one adjustment."""
        self._owners: dict[tuple[str, str], str] = {}

    def _claim(self, field: str, key: str, plugin: str) -> None:
        owner = self._owners.get((field, key))
        if owner is not None and owner != plugin:
            raise AdjustmentConflictError(field, key, plugin, owner)
        self._owners[(field, key)] = plugin

    def _release(self, field: str, key: str, plugin: str) -> None:
        owner = self._owners.get((field, key))
        if owner is not None and owner != plugin:
            raise AdjustmentConflictError(field, key, plugin, owner)
        self._owners.pop((field, key), None)

    def apply(self, plugin: str, adjust: api.ContainerAdjustment) -> None:
        """Apply ``plugin``'s adjustment; raise :class:`AdjustmentConflictError` on a clash."""
        self._annotations(plugin, adjust)
        self._keyed(
            plugin,
            "Mounts",
            adjust.mounts,
            into=self.container.mounts,
            record=self.adjustment.mounts,
            key_of=lambda mount: mount.destination,
        )
        self._env(plugin, adjust)
        if adjust.HasField("hooks"):
            self.container.hooks.MergeFrom(adjust.hooks)
            self.adjustment.hooks.MergeFrom(adjust.hooks)
        if adjust.HasField("linux"):
            self._keyed(
                plugin,
                "Devices",
                adjust.linux.devices,
                into=self.container.linux.devices,
                record=self.adjustment.linux.devices,
                key_of=lambda device: device.path,
            )
        for cdi in adjust.CDI_devices:
            self._claim("CdiDevices", cdi.name, plugin)
            if all(d.name != cdi.name for d in self.container.CDI_devices):
                self.container.CDI_devices.add().CopyFrom(cdi)
            self.adjustment.CDI_devices.add().CopyFrom(cdi)
        for rlimit in adjust.rlimits:
            self._claim("Rlimits", rlimit.type, plugin)
            kept = [r for r in self.container.rlimits if r.type != rlimit.type]
            del self.container.rlimits[:]
            self.container.rlimits.extend([*kept, rlimit])
            self.adjustment.rlimits.add().CopyFrom(rlimit)
        if adjust.args:
            self._claim("Args", "", plugin)
            args = list(adjust.args)
            if args[0] == "":
                args = args[1:]
            del self.container.args[:]
            self.container.args.extend(args)
            del self.adjustment.args[:]
            self.adjustment.args.extend(adjust.args)
        if adjust.HasField("linux"):
            linux = api.LinuxContainerAdjustment()
            linux.CopyFrom(adjust.linux)
            del linux.devices[:]
            self.adjustment.linux.MergeFrom(linux)

    def created(self) -> api.Container:
        """The container as the runtime creates it: plugin-added devices are allowed in
        its device cgroup (``linux.resources.devices``)."""
        added = {
            device.path
            for device in self.adjustment.linux.devices
            if removal_target(device.path) is None
        }
        rules = self.container.linux.resources.devices
        for device in self.container.linux.devices:
            rule = allow_rule(device)
            if device.path in added and rule not in rules:
                rules.append(rule)
        return self.container

    def _annotations(self, plugin: str, adjust: api.ContainerAdjustment) -> None:
        items = sorted(adjust.annotations.items(), key=lambda kv: removal_target(kv[0]) is None)
        for key, value in items:
            target = removal_target(key)
            if target is not None:
                self._release("Annotations", target, plugin)
                self.container.annotations.pop(target, None)
                self.adjustment.annotations.pop(target, None)
                self.adjustment.annotations[key] = ""
                continue
            self._claim("Annotations", key, plugin)
            self.container.annotations[key] = value
            self.adjustment.annotations[key] = value

    def _env(self, plugin: str, adjust: api.ContainerAdjustment) -> None:
        ordered = sorted(adjust.env, key=lambda kv: removal_target(kv.key) is None)
        for kv in ordered:
            target = removal_target(kv.key)
            name = target if target is not None else kv.key
            prefix = name + "="
            entries = list(self.container.env)
            index = next((i for i, e in enumerate(entries) if e.startswith(prefix)), None)
            if target is not None:
                self._release("Env", name, plugin)
                if index is not None:
                    del entries[index]
            else:
                self._claim("Env", name, plugin)
                if index is None:
                    entries.append(f"{name}={kv.value}")
                else:
                    entries[index] = f"{name}={kv.value}"
            del self.container.env[:]
            self.container.env.extend(entries)
            self.adjustment.env.add().CopyFrom(kv)

    def _keyed(
        self,
        plugin: str,
        field: str,
        adjusted: Iterable[_Entry],
        *,
        into: RepeatedCompositeFieldContainer[_Entry],
        record: RepeatedCompositeFieldContainer[_Entry],
        key_of: Callable[[_Entry], str],
    ) -> None:
        """Apply entries keyed by ``key_of`` (mount destination, device path) to ``into``:
        an entry replaces the one with its key, ``-KEY`` removes it; removals go first."""
        for entry in sorted(adjusted, key=lambda e: removal_target(key_of(e)) is None):
            target = removal_target(key_of(entry))
            key = target if target is not None else key_of(entry)
            if target is not None:
                self._release(field, key, plugin)
            else:
                self._claim(field, key, plugin)
            kept = [e for e in into if key_of(e) != key]
            if target is None:
                kept.append(entry)
            del into[:]
            into.extend(kept)
            record.add().CopyFrom(entry)
