"""``mig`` (``-lgip``, ``-lgipp``, ``-lcip``, ``-lgi``, ``-cgi [-C]``, ``-lci``, ``-cci``,
``-dci``, ``-dgi``) and
``-mig 0|1``: MIG partitions through the library's MIG API, in the real tool's formats.

Everything goes through NVML, so what this prints and changes is what every other client of
the node sees; a caller that may not write the live layer (a container) gets the real tool's
``Insufficient Permissions`` and exit 4.
"""

from __future__ import annotations

from .._errors import EXIT_INVALID_ARGUMENT, SmiError
from .._options import Options, bad, common_fields
from .._registry import ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from typing import Any, Final

    from .._nvml import Device, Nvml, NvmlError

EXIT_NO_PERMISSION = 4
ERROR_NO_PERMISSION = 4
ERROR_INSUFFICIENT_RESOURCES = 23
PROFILE_COUNT = 18
CI_PROFILE_COUNT = 9

LGIP = Option(("-lgip", "--list-gpu-instance-profiles"), "lgip")
LGIPP = Option(("-lgipp", "--list-gpu-instance-possible-placements"), "lgipp")
LGI = Option(("-lgi", "--list-gpu-instances"), "lgi")
LCI = Option(("-lci", "--list-compute-instances"), "lci")
LCIP = Option(("-lcip", "--list-compute-instance-profiles"), "lcip")
CGI = Option(("-cgi", "--create-gpu-instance"), "cgi", value=True)
DEFAULT_CI = Option(("-C", "--default-compute-instance"), "default-ci")
CCI = Option(("-cci", "--create-compute-instance"), "cci", default="")
DGI = Option(("-dgi", "--destroy-gpu-instance"), "dgi")
DCI = Option(("-dci", "--destroy-compute-instance"), "dci")
GI = Option(("-gi", "--gpu-instance-id"), "gi", value=True)
CI = Option(("-ci", "--compute-instance-id"), "ci", value=True)
_ACTIONS = ("lgip", "lgipp", "lgi", "lci", "lcip", "cgi", "cci", "dgi", "dci")


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    chosen = [a for a in _ACTIONS if a in values]
    if len(chosen) != 1 or ("default-ci" in values and chosen != ["cgi"]):
        raise bad()
    extra = {k: values[k] for k in ("cgi", "cci", "gi", "ci", "default-ci") if k in values}
    return Options(command="mig", mode=chosen[0], extra=extra, **common_fields(values, environ))


def _ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise SmiError("Invalid combination of input arguments.", EXIT_INVALID_ARGUMENT) from None


EXIT_NOT_FOUND = 6
"""The real tool's exit status when an object asked for does not exist (NVML's Not Found)."""


def _exit_code(exc: NvmlError) -> int:
    """The real tool's exit status for a refused MIG change: 4 for missing permissions."""
    return EXIT_NO_PERMISSION if exc.code == ERROR_NO_PERMISSION else 1


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        return _Mig(nvml, devices, options, write).run()

    return each_pass(options, render)


_NAME_COLUMNS: Final[tuple[tuple[tuple[int, ...], int], ...]] = (
    ((575,), 5),
    ((470,), 3),
    ((), 0),
)
"""How much wider the profile-name column of ``mig -lgi`` (and, from 575, ``-lgip``) is than
on driver 450, by the first driver that prints it so, newest first. Real output on file: 450
prints ``-lgi`` 54 columns wide and ``-lgip`` 79 (``smi_fixtures/mig``); 535/545-era nodes
``-lgi`` 57 and ``-lgip`` 79 (570-series B200 nodes, NVIDIA/mig-parted#166 and #187); a
GB200 node of 2025-08 (NVIDIA/mig-parted#227) and current nodes ``-lgi`` 59 and ``-lgip``
81. The exact branches where the columns widened are not published: 470 and 575 are the
first branches after the last narrower output on file."""


class _Mig:
    """One run of a MIG command over the selected GPUs."""

    def __init__(
        self, nvml: Nvml, devices: list[Device], options: Options, write: Callable[[str], None]
    ) -> None:
        from ctypes import (
            POINTER,
            Structure,
            c_uint,
            c_ulonglong,
            c_void_p,
        )

        from nvml_mock_engine._mig_fields import CI_PROFILE_FIELDS, GI_PROFILE_FIELDS

        class GiProfile(Structure):
            _fields_ = [(n, c_uint) for n in GI_PROFILE_FIELDS] + [("memorySizeMB", c_ulonglong)]

        class Placement(Structure):
            _fields_ = [("start", c_uint), ("size", c_uint)]

        class GiInfo(Structure):
            _fields_ = [
                ("device", c_void_p),
                ("id", c_uint),
                ("profileId", c_uint),
                ("placement", Placement),
            ]

        class CiProfile(Structure):
            _fields_ = [(n, c_uint) for n in CI_PROFILE_FIELDS]

        class CiInfo(Structure):
            _fields_ = [
                ("device", c_void_p),
                ("gpuInstance", c_void_p),
                ("id", c_uint),
                ("profileId", c_uint),
                ("placement", Placement),
            ]

        self.nvml, self.devices, self.options, self.write = nvml, devices, options, write
        self.GiProfile, self.GiInfo, self.CiProfile, self.CiInfo = (
            GiProfile,
            GiInfo,
            CiProfile,
            CiInfo,
        )
        self.c_uint, self.c_void_p, self.POINTER = c_uint, c_void_p, POINTER
        self.Placement = Placement

    # --- NVML ---------------------------------------------------------------------------

    def _gi_profiles(self, device: Device) -> list[tuple[int, Any]]:
        from ctypes import byref

        from .._nvml import NvmlError

        found = []
        for index in range(PROFILE_COUNT):
            info = self.GiProfile()
            try:
                self.nvml.call(
                    "nvmlDeviceGetGpuInstanceProfileInfo", device.handle, index, byref(info)
                )
            except NvmlError:
                continue
            found.append((index, info))
        # the real tool lists them smallest first: by slices, then memory
        found.sort(key=lambda item: (item[1].sliceCount, item[1].memorySizeMB, item[0]))
        return found

    def _gis(self, device: Device) -> list[Any]:
        """Every GPU instance of the device, by id."""
        from ctypes import byref

        from .._nvml import NvmlError

        gis = []
        for gid in range(14):
            handle = self.c_void_p()
            try:
                self.nvml.call("nvmlDeviceGetGpuInstanceById", device.handle, gid, byref(handle))
            except NvmlError:
                continue
            gis.append(handle)
        return gis

    def _gis_by_gpu(self) -> tuple[dict[int, dict[int, Any]], set[int]]:
        """The GPU instances of each picked GPU by ID (keyed by GPU index), and every ID seen
        on any of them: a destroy names an ID missing from one GPU only where no GPU has it."""
        on = {
            d.index: {gid: gi for _, gi, gid in self._picked_gis(None, (d,))} for d in self.devices
        }
        return on, {gid for present in on.values() for gid in present}

    def _picked_gis(
        self, wanted: list[int] | None, devices: Iterable[Device] | None = None
    ) -> Iterator[tuple[Device, Any, int]]:
        """(device, handle, id) of each GPU instance ``-gi`` picks (every one without it)."""
        for device in self.devices if devices is None else devices:
            for gi in self._gis(device):
                gid = getattr(self._gi_info(gi), "id")  # noqa: B009
                if wanted is None or gid in wanted:
                    yield device, gi, gid

    def _ci_profiles(self, gi: Any) -> list[tuple[int, Any]]:
        """(index, info) of each compute-instance profile the GPU instance offers."""
        from ctypes import byref

        from .._nvml import NvmlError

        offered = []
        for index in range(CI_PROFILE_COUNT):
            info = self.CiProfile()
            try:
                self.nvml.call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index, 0, byref(info)
                )
            except NvmlError:
                continue
            offered.append((index, info))
        return offered

    def _gi_info(self, gi: Any) -> Any:
        from ctypes import byref

        info = self.GiInfo()
        self.nvml.call("nvmlGpuInstanceGetInfo", gi, byref(info))
        return info

    def _profile_name(self, device: Device, profile_id: int) -> str:
        for _index, info in self._gi_profiles(device):
            if getattr(info, "id") == profile_id:  # noqa: B009
                return _gi_name(self.nvml, device, _index)
        return "?"

    def _cis(self, gi: Any) -> list[tuple[Any, Any]]:
        from ctypes import byref

        from .._nvml import NvmlError

        out = []
        for cid in range(8):
            handle = self.c_void_p()
            try:
                self.nvml.call("nvmlGpuInstanceGetComputeInstanceById", gi, cid, byref(handle))
            except NvmlError:
                continue
            info = self.CiInfo()
            self.nvml.call("nvmlComputeInstanceGetInfo_v2", handle, byref(info))
            out.append((handle, info))
        return out

    # --- commands -----------------------------------------------------------------------

    def run(self) -> int:
        from .._nvml import NvmlError

        enabled = []
        for device in self.devices:
            try:
                if device.mig_mode()[0] == 1:
                    enabled.append(device)
            except NvmlError:
                continue
        if not enabled:
            raise SmiError("No MIG-enabled devices found.", 6)
        self.devices = enabled
        mode = self.options.mode
        handler = {
            "lgip": self.list_profiles,
            "lgipp": self.list_placements,
            "lgi": self.list_gis,
            "lci": self.list_cis,
            "lcip": self.list_ci_profiles,
            "cgi": self.create_gis,
            "cci": self.create_cis,
            "dgi": self.destroy_gis,
            "dci": self.destroy_cis,
        }[mode]
        return handler()

    def set_mode(self, mode: int) -> int:
        from ctypes import byref, c_int

        from .._nvml import NvmlError

        rc = 0
        for device in self.devices:
            status = c_int(0)
            bus = device.pci_info().busId.decode()
            word = "Enabled" if mode else "Disabled"
            try:
                self.nvml.call("nvmlDeviceSetMigMode", device.handle, mode, byref(status))
            except NvmlError as exc:
                what = "enable" if mode else "disable"
                self.write(f"Unable to {what} MIG Mode for GPU {bus}: {exc.text}\n")
                rc = _exit_code(exc)
                continue
            if status.value != 0:
                self.write(
                    f"Warning: MIG mode is in pending {'enable' if mode else 'disable'} state"
                    f" for GPU {bus}:{self.nvml.error_string(status.value)}\n"
                    "Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective"
                    f" on GPU {bus}\n"
                )
            else:
                self.write(f"{word} MIG Mode for GPU {bus}\n")
        if rc == 0:
            self.write("All done.\n")
        return rc

    def _name_extra(self) -> int:
        """How much wider than 450's the profile-name column of ``-lgip`` / ``-lgi`` is on
        this driver (0, 3 or 5; see :data:`_NAME_COLUMNS`)."""
        from .._generation import parse_driver_version
        from .._nvml import NvmlError

        try:
            version = parse_driver_version(self.nvml.driver_version())
        except NvmlError:
            version = (9999,)
        return next(extra for since, extra in _NAME_COLUMNS if version >= since)

    def list_profiles(self) -> int:
        from nvml_mock_engine._mig_fields import GI_PROFILE_FIELDS

        wide = 2 if self._name_extra() == 5 else 0  # 79 columns, 81 from 575 on
        rule = "+" + "-" * (77 + wide) + "+"
        pad = " " * wide
        lines = [
            rule,
            "| GPU instance profiles:" + " " * (54 + wide) + "|",
            f"| GPU   Name             {pad}ID    Instances   Memory     P2P    SM    DEC   ENC  |",
            f"|                              {pad}Free/Total   GiB              CE    JPEG  OFA  |",
            "|" + "=" * (77 + wide) + "|",
        ]
        for device in self.devices:
            for index, info in self._gi_profiles(device):
                v = {n: getattr(info, n) for n in (*GI_PROFILE_FIELDS, "memorySizeMB")}
                free = self._remaining(device, v["id"])
                name = _gi_name(self.nvml, device, index)
                total = f"{free}/{v['instanceCount']}"
                lines.append(
                    f"|  {device.index:>2}  MIG {name:<{12 + wide}}{v['id']:>4}{total:>8}        "
                    f"{v['memorySizeMB'] / 1024:<11.2f}No     {v['multiprocessorCount']:<7}"
                    f"{v['decoderCount']:<6}{v['encoderCount']:<4}|"
                )
                engines = f"{v['copyEngineCount']:<6}{v['jpegCount']:<6}{v['ofaCount']:<4}"
                lines.append(f"|{'':>{61 + wide}}{engines}|")
                lines.append(rule)
        if len(lines) == 5:
            lines.append(rule)
        self.write("\n".join(lines) + "\n")
        return 0

    def list_placements(self) -> int:
        """``GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1``, one line per profile; the
        real tool lists every placement the profile can take (``Placement :`` for one), not
        only the free ones, as ``nvmlDeviceGetGpuInstancePossiblePlacements_v2`` does."""
        from ctypes import byref

        for device in self.devices:
            for _index, info in self._gi_profiles(device):
                pid = getattr(info, "id")  # noqa: B009
                count = self.c_uint(0)
                self.nvml.call(
                    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                    device.handle,
                    pid,
                    None,
                    byref(count),
                )
                places = (self.Placement * max(count.value, 1))()
                self.nvml.call(
                    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                    device.handle,
                    pid,
                    places,
                    byref(count),
                )
                starts = ",".join(str(places[i].start) for i in range(count.value))
                size = places[0].size if count.value else 0
                word = "Placements:" if count.value > 1 else "Placement :"
                self.write(
                    f"GPU {device.index:>2} Profile ID {pid:>2} {word} {{{starts}}}:{size}\n"
                )
        return 0

    def _remaining(self, device: Device, profile_id: int) -> int:
        from ctypes import byref

        count = self.c_uint(0)
        self.nvml.call(
            "nvmlDeviceGetGpuInstanceRemainingCapacity", device.handle, profile_id, byref(count)
        )
        return count.value

    def list_gis(self) -> int:
        extra = self._name_extra()
        rule = "+" + "-" * (52 + extra) + "+"
        pad = " " * extra
        lines = [
            rule,
            "| GPU instances:" + " " * (37 + extra) + "|",
            f"| GPU   Name          {pad}Profile  Instance   Placement  |",
            f"|                       {pad}ID       ID       Start:Size |",
            "|" + "=" * (52 + extra) + "|",
        ]
        wanted = _ids(self.options.extra.get("gi"))
        for device in self.devices:
            # the real tool lists by profile, smallest first, then by instance id
            order = {getattr(p, "id"): n for n, (_i, p) in enumerate(self._gi_profiles(device))}  # noqa: B009
            infos = sorted(
                (self._gi_info(gi) for gi in self._gis(device)),
                key=lambda i: (order.get(getattr(i, "profileId"), 99), getattr(i, "id")),  # noqa: B009
            )
            for info in infos:
                gid, pid = getattr(info, "id"), getattr(info, "profileId")  # noqa: B009
                if wanted is not None and gid not in wanted:
                    continue
                place = getattr(info, "placement")  # noqa: B009
                name = self._profile_name(device, pid)
                where = f"{place.start}:{place.size}"
                lines.append(
                    f"|{device.index:>4}  MIG {name:<{10 + extra}}{pid:>5}{gid:>9}{where:>13}     |"
                )
                lines.append(rule)
        if len(lines) == 5:
            raise SmiError("No GPU instances found: Not Found", EXIT_NOT_FOUND)
        self.write("\n".join(lines) + "\n")
        return 0

    def list_cis(self) -> int:
        rule = "+" + "-" * 68 + "+"
        lines = [
            rule,
            "| Compute instances:" + " " * 49 + "|",
            "| GPU     GPU       Name             Profile   Instance   Placement  |",
            "|       Instance                       ID        ID       Start:Size |",
            "|         ID                                                         |",
            "|" + "=" * 68 + "|",
        ]
        for device in self.devices:
            for gi in self._gis(device):
                gi_info = self._gi_info(gi)
                gid = getattr(gi_info, "id")  # noqa: B009
                for _handle, info in self._cis(gi):
                    name = self._ci_name(device, gi, getattr(info, "profileId"))  # noqa: B009
                    place = getattr(info, "placement")  # noqa: B009
                    where = f"{place.start}:{place.size}"
                    lines.append(
                        f"|  {device.index:>2}  {gid:>5}       MIG {name:<16}"
                        f"{info.profileId:>2}  {info.id:>8}"
                        f"  {where:>11}     |"
                    )
                    lines.append(rule)
        if len(lines) == 6:
            raise SmiError("No compute instances found: Not Found", 6)
        self.write("\n".join(lines) + "\n")
        return 0

    def list_ci_profiles(self) -> int:
        """The compute-instance profiles each GPU instance offers (``-gi`` picks some), free
        and total, SMs and shared engines; ``*`` marks the default, the one that spans the
        GPU instance."""
        from ctypes import byref

        rule = "+" + "-" * 86 + "+"
        lines = [
            rule,
            "| Compute instance profiles:" + " " * 59 + "|",
            (
                "| GPU     GPU       Name             Profile"
                "  Instances   Exclusive       Shared       |"
            ),
            (
                "|       Instance                       ID   "
                "  Free/Total     SM       DEC   ENC   OFA  |"
            ),
            (
                "|         ID                                "
                "                          CE    JPEG       |"
            ),
            "|" + "=" * 86 + "|",
        ]
        for device, gi, gid in self._picked_gis(_ids(self.options.extra.get("gi"))):
            offered = self._ci_profiles(gi)
            widest = max((info.sliceCount for _i, info in offered), default=0)
            for index, info in offered:
                free = self.c_uint(0)
                self.nvml.call(
                    "nvmlGpuInstanceGetComputeInstanceRemainingCapacity", gi, index, byref(free)
                )
                name = self._ci_name(device, gi, index)
                star = "*" if info.sliceCount == widest else " "
                total = f"{free.value}/{info.instanceCount}"
                lines.append(
                    f"|{device.index:>4}{gid:>7}       MIG {name:<16}{info.id:>2}{star}"
                    f"     {total:<14}{info.multiprocessorCount:<10}"
                    f"{info.sharedDecoderCount:<6}{info.sharedEncoderCount:<6}"
                    f"{info.sharedOfaCount:<4}|"
                )
                lines.append(f"|{'':70}{info.sharedCopyEngineCount:<6}{info.sharedJpegCount:<10}|")
                lines.append(rule)
        if len(lines) == 6:
            raise SmiError("No GPU instances found: Not Found", EXIT_NOT_FOUND)
        self.write("\n".join(lines) + "\n")
        return 0

    def _ci_name(self, device: Device, gi: Any, profile: int) -> str:
        from ctypes import Structure, byref, c_char, c_uint

        from nvml_mock_engine._mig_fields import CI_PROFILE_FIELDS

        from .._nvml import NvmlError, struct_version

        class CiProfileV2(Structure):
            _fields_ = [
                ("version", c_uint),
                *((n, c_uint) for n in CI_PROFILE_FIELDS),
                ("name", c_char * 96),
            ]

        info = CiProfileV2()
        info.version = struct_version(CiProfileV2, 2)
        try:
            self.nvml.call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfoV", gi, profile, 0, byref(info)
            )
        except NvmlError:
            return "?"
        return str(info.name.decode()).removeprefix("MIG ")

    def create_gis(self) -> int:
        from ctypes import byref

        from .._nvml import NvmlError

        wanted = [w.strip() for w in self.options.extra["cgi"].split(",")]
        rc = 0
        for device in self.devices:
            profiles = self._gi_profiles(device)
            for want in wanted:
                match = [
                    (i, p)
                    for i, p in profiles
                    if want == str(p.id) or want == _gi_name(self.nvml, device, i)
                ]
                if not match:
                    self.write(
                        f"Unable to create a GPU instance on GPU {device.index} using "
                        f"profile {want}: Invalid Argument\n"
                    )
                    rc = EXIT_INVALID_ARGUMENT
                    continue
                index, info = match[0]
                pid = getattr(info, "id")  # noqa: B009
                gi = self.c_void_p()
                try:
                    self.nvml.call("nvmlDeviceCreateGpuInstance", device.handle, pid, byref(gi))
                except NvmlError as exc:
                    self.write(
                        f"Unable to create a GPU instance on GPU {device.index} using "
                        f"profile {want}: {exc.text}\n"
                    )
                    rc = _exit_code(exc)
                    continue
                gid = getattr(self._gi_info(gi), "id")  # noqa: B009
                name = _gi_name(self.nvml, device, index)
                self.write(
                    f"Successfully created GPU instance ID {gid:>2} on GPU {device.index:>2}"
                    f" using profile MIG {name} (ID {pid:>2})\n"
                )
                if "default-ci" in self.options.extra:
                    rc = max(rc, self._create_ci(device, gi, gid, None))
        if rc:
            self.write(
                "Failed to create GPU instances: "
                + ("Insufficient Permissions\n" if rc == EXIT_NO_PERMISSION else "Unknown Error\n")
            )
        return rc

    def _create_ci(self, device: Device, gi: Any, gid: int, profile: int | None) -> int:
        from ctypes import byref

        from .._nvml import NvmlError

        if profile is None:  # the default: the compute instance that spans the GPU instance
            offered = self._ci_profiles(gi)
            profile = max(offered, key=lambda item: item[1].sliceCount)[0] if offered else 0
        ci = self.c_void_p()
        try:
            self.nvml.call("nvmlGpuInstanceCreateComputeInstance", gi, profile, byref(ci))
        except NvmlError as exc:
            self.write(
                f"Unable to create a compute instance on GPU {device.index:>2} GPU"
                f" instance ID {gid:>2} using profile {profile}: {exc.text}\n"
            )
            return _exit_code(exc)
        created = self.CiInfo()
        self.nvml.call("nvmlComputeInstanceGetInfo_v2", ci, byref(created))
        name = self._ci_name(device, gi, profile)
        self.write(
            f"Successfully created compute instance ID {created.id:>2} on GPU"
            f" {device.index:>2} GPU instance ID {gid:>2} using profile MIG {name}"
            f" (ID {profile:>2})\n"
        )
        return 0

    def create_cis(self) -> int:
        text = self.options.extra.get("cci", "")
        profiles: list[int | None] = [None] if not text else [int(p) for p in text.split(",")]
        rc = 0
        for device, gi, gid in self._picked_gis(_ids(self.options.extra.get("gi"))):
            for profile in profiles:
                rc = max(rc, self._create_ci(device, gi, gid, profile))
        return rc

    def destroy_gis(self) -> int:
        from .._nvml import NvmlError

        wanted = _ids(self.options.extra.get("gi"))
        rc = 0
        found = False
        on, anywhere = self._gis_by_gpu()
        for device in self.devices:
            present = on[device.index]
            for gid in sorted(present) if wanted is None else wanted:
                if gid not in present and gid in anywhere:
                    continue  # on another of the GPUs picked
                if gid not in present:  # the real tool names each one it cannot find
                    self.write(
                        f"Unable to destroy GPU instance ID {gid:>2} from GPU"
                        f" {device.index:>2}: Not Found\n"
                    )
                    rc = max(rc, EXIT_NOT_FOUND)
                    continue
                found = True
                try:
                    self.nvml.call("nvmlGpuInstanceDestroy", present[gid])
                except NvmlError as exc:
                    self.write(
                        f"Unable to destroy GPU instance ID {gid:>2} from GPU"
                        f" {device.index:>2}: {exc.text}\n"
                    )
                    rc = _exit_code(exc)
                    continue
                self.write(
                    f"Successfully destroyed GPU instance ID {gid:>2} from GPU {device.index:>2}\n"
                )
        if not found and rc in (0, EXIT_NOT_FOUND):
            self.write("Failed to destroy GPU instances: Not Found\n")
            return EXIT_NOT_FOUND
        return rc

    def destroy_cis(self) -> int:
        from .._nvml import NvmlError

        wanted_gi = _ids(self.options.extra.get("gi"))
        wanted_ci = _ids(self.options.extra.get("ci"))
        rc = 0
        found = False
        on, anywhere = self._gis_by_gpu()
        for device in self.devices:
            present = on[device.index]
            for gid in sorted(present) if wanted_gi is None else wanted_gi:
                gi = present.get(gid)
                if gi is None and gid in anywhere:
                    continue  # on another of the GPUs picked
                if gi is None:
                    self.write(
                        f"Unable to find GPU instance ID {gid:>2} on GPU {device.index:>2}:"
                        " Not Found\n"
                    )
                    rc = max(rc, EXIT_NOT_FOUND)
                    continue
                cis = {getattr(info, "id"): handle for handle, info in self._cis(gi)}  # noqa: B009
                for cid in sorted(cis) if wanted_ci is None else wanted_ci:
                    if cid not in cis:
                        self.write(
                            f"Unable to destroy compute instance ID {cid:>2} from GPU"
                            f" {device.index:>2} GPU instance ID {gid:>2}: Not Found\n"
                        )
                        rc = max(rc, EXIT_NOT_FOUND)
                        continue
                    found = True
                    try:
                        self.nvml.call("nvmlComputeInstanceDestroy", cis[cid])
                    except NvmlError as exc:
                        self.write(
                            f"Unable to destroy compute instance ID {cid:>2} from GPU"
                            f" {device.index:>2} GPU instance ID {gid:>2}: {exc.text}\n"
                        )
                        rc = _exit_code(exc)
                        continue
                    self.write(
                        f"Successfully destroyed compute instance ID {cid:>2} from GPU"
                        f" {device.index:>2} GPU instance ID {gid:>2}\n"
                    )
        if not found and rc in (0, EXIT_NOT_FOUND):
            self.write("Failed to destroy compute instances: Not Found\n")
            return EXIT_NOT_FOUND
        return rc


def _gi_name(nvml: Nvml, device: Device, index: int) -> str:
    """A profile's name (``1g.10gb``) from the V profile info."""
    from ctypes import Structure, byref, c_char, c_uint, c_ulonglong

    from nvml_mock_engine._mig_fields import GI_PROFILE_FIELDS

    from .._nvml import struct_version

    fields: list[tuple[str, Any]] = [("version", c_uint)]
    fields += [(n, c_uint) for n in GI_PROFILE_FIELDS]
    fields += [("memorySizeMB", c_ulonglong), ("name", c_char * 96)]

    class GiProfileV2(Structure):
        _fields_ = fields

    info = GiProfileV2()
    info.version = struct_version(GiProfileV2, 2)
    nvml.call("nvmlDeviceGetGpuInstanceProfileInfoV", device.handle, index, byref(info))
    return str(info.name.decode()).removeprefix("MIG ")


COMMANDS = (
    Command(
        "mig",
        word="mig",
        options=(LGIP, LGIPP, LGI, LCI, LCIP, CGI, DEFAULT_CI, CCI, DGI, DCI, GI, CI, ID, LIBRARY),
        build=_build,
        run=_run,
    ),
)


def list_rows(device: Device) -> list[str]:
    """``-L``'s rows for a GPU's MIG devices (none unless MIG is enabled):
    ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)``."""
    from ctypes import c_uint, create_string_buffer

    from .._mig_view import mig_handles

    rows = []
    for index, mig in mig_handles(device):
        name, uuid = create_string_buffer(96), create_string_buffer(96)
        device.nvml.call("nvmlDeviceGetName", mig, name, c_uint(96))
        device.nvml.call("nvmlDeviceGetUUID", mig, uuid, c_uint(96))
        profile = name.value.decode().rpartition(" MIG ")[2]
        rows.append(f"  MIG {profile:<12}Device {index:>2}: (UUID: {uuid.value.decode()})")
    return rows
