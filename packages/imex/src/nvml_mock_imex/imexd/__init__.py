"""``nvidia-imex``, the IMEX daemon work-alike (installed as ``bin/nvidia-imex`` in the
overlay and the driver root, as ``nvml-mock-imex`` elsewhere)."""

from nvml_mock_imex.imexd.cli import main

__all__ = ["main"]
