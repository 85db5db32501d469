"""``--version``: the tool, NVML, driver and CUDA versions, as NVML reports them."""

from __future__ import annotations

from .._options import Options, library
from .._registry import LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Nvml

VERSION = Option(("--version",), "version")


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    return Options(command="version", library=library(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import open_nvml

    nvml = open_nvml(options.library)
    try:
        write(_version(nvml))
    finally:
        nvml.shutdown()
    return 0


def _version(nvml: Nvml) -> str:
    from .._nvml import NvmlError

    def get(fn: Callable[[], object]) -> str:
        try:
            return str(fn())
        except NvmlError:
            return "N/A"

    driver = get(nvml.driver_version)
    nvml_version = get(nvml.nvml_version)
    parts = nvml_version.split(".")
    if len(parts) >= 3:
        nvml_version = ".".join(parts[1:3])
    from .._values import cuda_version

    cuda = get(nvml.cuda_driver_version)
    cuda_s = cuda_version(int(cuda)) if cuda.isdigit() else cuda
    from .._generation import parse_driver_version

    if parse_driver_version(driver) >= KMD_FROM:
        # 610 deprecated the driver and CUDA lines for the kernel-mode driver's and the CUDA
        # user-mode driver's versions (the real 610.57.04 output, smi_fixtures/exporter)
        return (
            f"NVIDIA-SMI version  : {driver}\n"
            f"NVML version        : {nvml_version}\n"
            'DRIVER version      : Deprecated, see "KMD version" instead\n'
            'CUDA version        : Deprecated, see "CUDA UMD version" instead\n'
            f"KMD version         : {driver}\n"
            f"CUDA UMD version    : {cuda_s}\n"
        )
    return (
        f"NVIDIA-SMI version  : {driver}\n"
        f"NVML version        : {nvml_version}\n"
        f"DRIVER version      : {driver}\n"
        f"CUDA Version        : {cuda_s}\n"
    )


KMD_FROM = (610,)
"""The first driver whose tool names the kernel-mode driver's and CUDA user-mode driver's
versions (real 610.43.02, 610.43.03 and 610.57.04 output)."""


COMMANDS = (
    Command("version", select=("version",), options=(VERSION, LIBRARY), build=_build, run=_run),
)
