"""The live file's contract: its key declaration, generated layout, vocabulary and writer.

The live layer (``config/live.nvmlmock`` beside the board state) is what changes a node's
GPUs while processes run. Everything that must agree on it is here, on the floor beside the
wire contracts: the key declaration (``keys.toml``) and the tables and layout generated from
it, the live vocabulary (utilization patterns, durations, memory sizes), the board binding
and GPU names, the allocation records, and the one writer (:class:`LiveLayer`), which calls
the mock library's primitives through a versioned ABI (:mod:`nvml_mock_live.library`).
The engine (``nvml-mock-ctl``, the node agent, the ``nvidia-smi`` work-alike, staging) and the
NRI plugin write through it; nothing here imports them.
"""

from __future__ import annotations

from nvml_mock_live._version import __version__
from nvml_mock_live.allocations import MIG_HOLDINGS_MAX, Allocation
from nvml_mock_live.board import BoardGpu, read_board, resolve_gpus
from nvml_mock_live.errors import AllocationError, LiveLayerError, LiveValueError
from nvml_mock_live.layer import LIVE_FILE_NAME, LiveEvent, LiveLayer, create, ensure
from nvml_mock_live.vocabulary import UTIL_PATTERNS, parse_memory, parse_utilization

__all__ = [
    "LIVE_FILE_NAME",
    "MIG_HOLDINGS_MAX",
    "UTIL_PATTERNS",
    "Allocation",
    "AllocationError",
    "BoardGpu",
    "LiveEvent",
    "LiveLayer",
    "LiveLayerError",
    "LiveValueError",
    "__version__",
    "create",
    "ensure",
    "parse_memory",
    "parse_utilization",
    "read_board",
    "resolve_gpus",
]
