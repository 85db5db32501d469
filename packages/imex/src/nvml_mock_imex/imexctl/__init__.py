"""``nvidia-imex-ctl``, the IMEX control tool work-alike (``bin/nvidia-imex-ctl`` in the
overlay and the driver root, ``nvml-mock-imex-ctl`` elsewhere)."""

from nvml_mock_imex.imexctl.cli import main

__all__ = ["main"]
