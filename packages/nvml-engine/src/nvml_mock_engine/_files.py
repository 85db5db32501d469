"""Reading and writing the overlay's small files so that no reader ever sees a partial one.

Both helpers are the live-file contract's (:mod:`nvml_mock_live.files`,
:mod:`nvml_mock_live.board`): the live writer needs them too, and a fact has one home.
"""

from __future__ import annotations

from nvml_mock_live.board import gpu_sections
from nvml_mock_live.files import write_atomic

__all__ = ["gpu_sections", "write_atomic"]
