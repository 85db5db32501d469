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
"""

from __future__ import annotations

from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import AdjustmentConflictError


def removal_target(key: str) -> str | None:
    """The key a removal marker (``-KEY``) names, or ``None`` for a plain key."""
    return key[1:] if key.startswith("-") else None


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
        self._mounts(plugin, adjust)
        self._env(plugin, adjust)
        if adjust.HasField("hooks"):
            self.container.hooks.MergeFrom(adjust.hooks)
            self.adjustment.hooks.MergeFrom(adjust.hooks)
        self._devices(plugin, adjust)
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

    def _mounts(self, plugin: str, adjust: api.ContainerAdjustment) -> None:
        ordered = sorted(adjust.mounts, key=lambda m: removal_target(m.destination) is None)
        for mount in ordered:
            target = removal_target(mount.destination)
            destination = target if target is not None else mount.destination
            kept = [m for m in self.container.mounts if m.destination != destination]
            del self.container.mounts[:]
            if target is not None:
                self._release("Mounts", target, plugin)
                self.container.mounts.extend(kept)
            else:
                self._claim("Mounts", destination, plugin)
                self.container.mounts.extend([*kept, mount])
            self.adjustment.mounts.add().CopyFrom(mount)

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

    def _devices(self, plugin: str, adjust: api.ContainerAdjustment) -> None:
        if not adjust.HasField("linux"):
            return
        devices = self.container.linux.devices
        ordered = sorted(adjust.linux.devices, key=lambda d: removal_target(d.path) is None)
        for device in ordered:
            target = removal_target(device.path)
            path = target if target is not None else device.path
            kept = [d for d in devices if d.path != path]
            del devices[:]
            if target is not None:
                self._release("Devices", path, plugin)
                devices.extend(kept)
            else:
                self._claim("Devices", path, plugin)
                devices.extend([*kept, device])
            self.adjustment.linux.devices.add().CopyFrom(device)
