"""The live file's contract: its key declaration, generated layout, vocabulary and writer.

The live layer (``config/live.nvmlmock`` beside the board state) is what changes a node's
GPUs while processes run. Everything that must agree on it is here, on the floor beside the
wire contracts: the key declaration (``keys.toml``) and the tables and layout generated from
it, the live vocabulary (utilization patterns, durations, triggers, fault recipes), where the
file is (:mod:`.locate`, the library's rule), the board binding and GPU names, the allocation
records, the scenario document, and the one writer (:class:`LiveLayer`), which calls the mock
library's primitives through a versioned ABI (:mod:`nvml_mock_live.library`). The engine
(``nvml-mock-ctl``, the node agent, the ``nvidia-smi`` work-alike, staging), the topology
service and the NRI plugin use it; nothing here imports them.

Names are resolved on first use, so a tool that only needs :mod:`.locate` (the work-alike, in
every workload container) does not pay for the writer at start-up.
"""

from __future__ import annotations

from nvml_mock_live._version import __version__

# The TYPE_CHECKING = False idiom, not typing's: ``nvml-mock-ctl status`` and ``xid`` start
# through this package and must not pay for typing (and the re it brings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvml_mock_live.allocations import MIG_HOLDINGS_MAX, Allocation
    from nvml_mock_live.board import BoardGpu, read_board, resolve_gpus
    from nvml_mock_live.errors import AllocationError, LiveError, LiveLayerError, LiveValueError
    from nvml_mock_live.layer import LIVE_FILE_NAME, LiveEvent, LiveLayer, create, ensure
    from nvml_mock_live.vocabulary import UTIL_PATTERNS, parse_memory, parse_utilization

_LAZY = {
    "MIG_HOLDINGS_MAX": "allocations",
    "Allocation": "allocations",
    "BoardGpu": "board",
    "read_board": "board",
    "resolve_gpus": "board",
    "AllocationError": "errors",
    "LiveError": "errors",
    "LiveLayerError": "errors",
    "LiveValueError": "errors",
    "LIVE_FILE_NAME": "layer",
    "LiveEvent": "layer",
    "LiveLayer": "layer",
    "create": "layer",
    "ensure": "layer",
    "UTIL_PATTERNS": "vocabulary",
    "parse_memory": "vocabulary",
    "parse_utilization": "vocabulary",
    "vocabulary": "",
}

__all__ = [
    "LIVE_FILE_NAME",
    "MIG_HOLDINGS_MAX",
    "UTIL_PATTERNS",
    "Allocation",
    "AllocationError",
    "BoardGpu",
    "LiveError",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = (
        import_module(f"{__name__}.{name}")
        if module == ""
        else getattr(import_module(f"{__name__}.{module}"), name)
    )
    globals()[name] = value
    return value
