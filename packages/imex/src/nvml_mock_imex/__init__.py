"""nvml-mock-imex: the IMEX daemon and control tool work-alikes (``nvidia-imex``,
``nvidia-imex-ctl``).

The modules here are the domain layer: the daemon's config file, node list, peer wire and the
status layouts of ``nvidia-imex-ctl``. The front doors are :mod:`nvml_mock_imex.imexd`
(``nvidia-imex``) and :mod:`nvml_mock_imex.imexctl` (``nvidia-imex-ctl``)."""

from nvml_mock_imex._version import __version__

__all__ = ["__version__"]
