"""A MIG layout made at stage time, named as NVIDIA's mig-parted names them.

``gpu.mig`` (the config file's ``mig``, ``stage --mig``, ``NVML_MOCK_MIG``) is either one of
mig-parted's layout names for every GPU of the node:

- ``all-disabled``: MIG off;
- ``all-enabled``: MIG on, no instances;
- ``all-<profile>`` (``all-1g.10gb``, ``all-1g.10gb.me`` for ``1g.10gb+me``): as many
  instances of that profile as the board holds, each with its default compute instance;
- ``all-balanced``: two 1-slice, one 2-slice and one 3-slice instance (``2x 1g.10gb``,
  ``1x 2g.20gb``, ``1x 3g.40gb`` on an H100), as mig-parted's ``all-balanced``;

or a list in mig-parted's own config shape, for some GPUs or each::

    - devices: [0, 1]        # or all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "3g.40gb": 1}

The layout is made through the library itself, in a child process (``python -m
nvml_mock_engine.mig_layout``) that loads the staged library and calls NVML's own MIG API,
so the live layer keeps one writer. Staging with a layout replaces the GPUs' MIG layout with
it; staging without one leaves the layout the node has.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from nvml_mock_engine._mig_fields import CI_PROFILE_FIELDS, GI_PROFILE_FIELDS
from nvml_mock_engine.errors import ConfigError, StageError
from nvml_mock_engine.mig import MigGpuInstanceProfile

__all__ = ["GpuLayout", "MigPlan", "apply", "parse_spec"]

KEY: Final = "mig"
"""The setting's name in errors (the config file key; the flag is ``--mig``)."""
_BALANCED: Final = ((0, 2), (1, 1), (2, 1))
"""mig-parted's ``all-balanced``: NVML profile index (1, 2, 3 slices) and count."""
APPLY_TIMEOUT_S: Final = 60.0
"""How long the child process that makes the layout may take."""


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """One GPU's layout: MIG on or off, and the GPU-instance profiles to create (NVML profile
    indices, largest first so that every layout the board can hold is placed)."""

    enabled: bool
    profiles: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MigPlan:
    """The layout of every GPU of the node, by index; ``spec`` is what was asked, for logs."""

    spec: str
    gpus: tuple[GpuLayout, ...]


def _fail(message: str, value: object) -> ConfigError:
    return ConfigError(KEY, f"{message}, got {value!r}")


def _by_name(table: Sequence[MigGpuInstanceProfile], name: str, value: object) -> int:
    wanted = name.replace(".me", "+me") if name.endswith(".me") else name
    for p in table:
        if p.name == wanted:
            return p.profile
    names = ", ".join(p.name for p in table)
    raise _fail(f"{name!r} is not a MIG profile of this board ({names})", value)


def _check_fits(table: Sequence[MigGpuInstanceProfile], profiles: list[int], value: object) -> None:
    """Refuse a layout the board cannot hold: a profile's instance count, or more memory
    slices than the GPU has (placements are then found by the library)."""
    by_index = {p.profile: p for p in table}
    for index in set(profiles):
        p = by_index[index]
        if profiles.count(index) > p.instances:
            raise _fail(f"{p.name}: at most {p.instances} on this board", value)
    used = sum(by_index[i].placement_size for i in profiles)
    if used > 8:
        raise _fail("more memory slices than the GPU has (8)", value)


def _ordered(table: Sequence[MigGpuInstanceProfile], profiles: list[int]) -> tuple[int, ...]:
    size = {p.profile: (p.placement_size, p.slices) for p in table}
    return tuple(sorted(profiles, key=lambda i: size[i], reverse=True))


def _named(table: Sequence[MigGpuInstanceProfile], name: str, value: object) -> GpuLayout:
    if name == "all-disabled":
        return GpuLayout(False)
    if name == "all-enabled":
        return GpuLayout(True)
    if name == "all-balanced":
        present = {p.profile for p in table}
        profiles = [i for i, n in _BALANCED if i in present for _ in range(n)]
        return GpuLayout(True, _ordered(table, profiles))
    if name.startswith("all-"):
        index = _by_name(table, name[4:], value)
        count = next(p.instances for p in table if p.profile == index)
        return GpuLayout(True, (index,) * count)
    raise _fail(
        "must be all-disabled, all-enabled, all-balanced, all-<profile> or a list of "
        "{devices, mig-enabled, mig-devices}",
        value,
    )


def _devices(raw: object, count: int, value: object) -> list[int]:
    if raw == "all":
        return list(range(count))
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise _fail("devices must be all or a list of GPU indices", value)
    for index in raw:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise _fail(
                f"devices: {index!r} is not a GPU index of this node (0..{count - 1})", value
            )
    return list(raw)


def _listed(
    table: Sequence[MigGpuInstanceProfile], entries: list[object], count: int, value: object
) -> list[GpuLayout | None]:
    layouts: list[GpuLayout | None] = [None] * count
    for entry in entries:
        if not isinstance(entry, dict) or not set(entry) <= {
            "devices",
            "mig-enabled",
            "mig-devices",
        }:
            raise _fail("each entry is {devices, mig-enabled, mig-devices}", value)
        enabled = entry.get("mig-enabled", True)
        if not isinstance(enabled, bool):
            raise _fail("mig-enabled must be true or false", value)
        wanted = entry.get("mig-devices", {}) or {}
        if not isinstance(wanted, dict) or (wanted and not enabled):
            raise _fail("mig-devices must map profile names to counts (with mig-enabled)", value)
        profiles: list[int] = []
        for name, n in wanted.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise _fail(f"{name}: the count must be a whole number", value)
            profiles += [_by_name(table, str(name), value)] * n
        _check_fits(table, profiles, value)
        for index in _devices(entry.get("devices", "all"), count, value):
            if layouts[index] is not None:
                raise _fail(f"GPU {index} is listed twice", value)
            layouts[index] = GpuLayout(enabled, _ordered(table, profiles))
    return layouts


def parse_spec(value: object, table: Sequence[MigGpuInstanceProfile], count: int) -> MigPlan | None:
    """The plan for *value* on a board with *table* and *count* GPUs; None for no layout
    (``None`` or ``""``). A flag or env value may be a name or the list as JSON/YAML text.
    :class:`ConfigError` names what is wrong."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    spec = value
    if isinstance(value, str) and value.strip()[:1] in ("[", "-"):
        try:
            spec = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise _fail(f"is not a YAML/JSON list ({exc.__class__.__name__})", value) from None
    if not table:
        raise _fail("this board has no MIG", value)
    if isinstance(spec, str):
        layout = _named(table, spec.strip(), value)
        _check_fits(table, list(layout.profiles), value)
        return MigPlan(spec.strip(), (layout,) * count)
    if isinstance(spec, list):
        layouts = _listed(table, list(spec), count, value)
        # GPUs no entry names keep MIG off, as mig-parted leaves unnamed devices alone on a
        # node it configures from scratch
        gpus = tuple(layout or GpuLayout(False) for layout in layouts)
        return MigPlan(json.dumps(spec, separators=(",", ":")), gpus)
    raise _fail("must be a layout name or a list", value)


def apply(plan: MigPlan, library: Path, state_file: Path) -> tuple[tuple[str, ...], ...]:
    """Make *plan* on the node whose rendered state is *state_file*, through *library*, in a
    child process (the library is process-wide state; the stager must not load it).
    :class:`StageError` carries the child's reason when the layout cannot be made.

    Returns the UUIDs of the MIG devices the node then has, per GPU index, in the order
    ``nvmlDeviceGetMigDeviceHandleByIndex`` gives them: the place of each is its
    ``<gpu>:<mig>`` name, which the staged CDI spec uses as the toolkit's does."""
    request = {
        "library": str(library),
        "gpus": [{"enabled": g.enabled, "profiles": list(g.profiles)} for g in plan.gpus],
    }
    # every GPU of the node, whatever view the stager's own environment would give
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MOCK_") and k != "NVIDIA_VISIBLE_DEVICES"
    }
    env["MOCK_NVML_CONFIG"] = str(state_file)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nvml_mock_engine.mig_layout"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            timeout=APPLY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StageError(
            f"MIG layout {plan.spec}: not made within {APPLY_TIMEOUT_S:.0f}s"
        ) from None
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise StageError(f"MIG layout {plan.spec}: {reason[0]}")
    try:
        made = json.loads(done.stdout)
        return tuple(tuple(str(uuid) for uuid in gpu) for gpu in made)
    except (ValueError, TypeError):
        raise StageError(
            f"MIG layout {plan.spec}: made, but its MIG devices could not be listed "
            f"({done.stdout.strip()[:80]!r})"
        ) from None


# --- the child: NVML calls against the staged library --------------------------------


class _Nvml:
    def __init__(self, library: str) -> None:
        self.lib = ctypes.CDLL(library)

    def __call__(self, name: str, *args: object) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            error = self.lib.nvmlErrorString
            error.restype = ctypes.c_char_p
            raise RuntimeError(f"{name}: {error(rc).decode()}")

    def ok(self, name: str, *args: object) -> bool:
        return int(getattr(self.lib, name)(*args)) == 0


class _GiProfile(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in GI_PROFILE_FIELDS] + [
        ("memorySizeMB", ctypes.c_ulonglong)
    ]


class _CiProfile(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in CI_PROFILE_FIELDS]


GI_IDS: Final = 14
CI_IDS: Final = 8
CI_PROFILES: Final = 9


def _clear(nvml: _Nvml, dev: ctypes.c_void_p) -> None:
    """Every compute and GPU instance of the GPU destroyed (compute instances first)."""
    for gid in range(GI_IDS):
        gi = ctypes.c_void_p()
        if not nvml.ok("nvmlDeviceGetGpuInstanceById", dev, gid, ctypes.byref(gi)):
            continue
        for cid in range(CI_IDS):
            ci = ctypes.c_void_p()
            if nvml.ok("nvmlGpuInstanceGetComputeInstanceById", gi, cid, ctypes.byref(ci)):
                nvml("nvmlComputeInstanceDestroy", ci)
        nvml("nvmlGpuInstanceDestroy", gi)


def _make(nvml: _Nvml, index: int, layout: Mapping[str, object]) -> None:
    dev = ctypes.c_void_p()
    nvml("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(dev))
    current, pending = ctypes.c_uint(), ctypes.c_uint()
    nvml("nvmlDeviceGetMigMode", dev, ctypes.byref(current), ctypes.byref(pending))
    if current.value == 1:
        _clear(nvml, dev)
    enabled = bool(layout["enabled"])
    status = ctypes.c_int()
    nvml("nvmlDeviceSetMigMode", dev, int(enabled), ctypes.byref(status))
    nvml("nvmlDeviceGetMigMode", dev, ctypes.byref(current), ctypes.byref(pending))
    if current.value != int(enabled):
        raise RuntimeError(f"GPU {index}: MIG mode stays pending (the GPU is in use)")
    profiles = layout["profiles"]
    assert isinstance(profiles, list)
    for profile in profiles:
        info = _GiProfile()
        nvml("nvmlDeviceGetGpuInstanceProfileInfo", dev, profile, ctypes.byref(info))
        gi = ctypes.c_void_p()
        try:
            nvml("nvmlDeviceCreateGpuInstance", dev, info.id, ctypes.byref(gi))
        except RuntimeError as exc:
            raise RuntimeError(f"GPU {index}: {exc}") from None
        best, widest = 0, 0
        for ci_index in range(CI_PROFILES):
            ci_info = _CiProfile()
            if (
                nvml.ok(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    gi,
                    ci_index,
                    0,
                    ctypes.byref(ci_info),
                )
                and ci_info.sliceCount > widest
            ):
                best, widest = ci_index, ci_info.sliceCount
        ci = ctypes.c_void_p()
        nvml("nvmlGpuInstanceCreateComputeInstance", gi, best, ctypes.byref(ci))


def _mig_uuids(nvml: _Nvml, index: int) -> list[str]:
    """The UUIDs of GPU *index*'s MIG devices, in MIG device index order."""
    dev = ctypes.c_void_p()
    nvml("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(dev))
    count = ctypes.c_uint()
    if not nvml.ok("nvmlDeviceGetMaxMigDeviceCount", dev, ctypes.byref(count)):
        return []
    uuids: list[str] = []
    for mig_index in range(count.value):
        mig = ctypes.c_void_p()
        if not nvml.ok("nvmlDeviceGetMigDeviceHandleByIndex", dev, mig_index, ctypes.byref(mig)):
            break
        buf = ctypes.create_string_buffer(96)
        nvml("nvmlDeviceGetUUID", mig, buf, ctypes.c_uint(len(buf)))
        uuids.append(buf.value.decode())
    return uuids


def _child(request: Mapping[str, object]) -> list[list[str]]:
    library = request["library"]
    gpus = request["gpus"]
    assert isinstance(library, str) and isinstance(gpus, list)
    nvml = _Nvml(library)
    nvml("nvmlInit_v2")
    try:
        for index, layout in enumerate(gpus):
            _make(nvml, index, layout)
        return [_mig_uuids(nvml, index) for index in range(len(gpus))]
    finally:
        nvml.lib.nvmlShutdown()


if __name__ == "__main__":  # pragma: no cover - run by apply() in a child process
    try:
        print(json.dumps(_child(json.loads(sys.stdin.read()))))
    except Exception as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
