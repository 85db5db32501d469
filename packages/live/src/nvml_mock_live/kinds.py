"""The numbers the live file stores for the vocabulary's words, and the fault trigger's keys.

Utilization patterns, fault trigger kinds and NVML events by name, from the generated rows
(:mod:`._vocabulary`), beside the keys a trigger occupies. :mod:`.vocabulary` (the parsers)
re-exports them; they are here, in a module that imports nothing heavy, so a command that
only shows what the file holds (``nvml-mock-ctl status``) names them without loading the
parsers.
"""

from __future__ import annotations

from nvml_mock_live import _vocabulary as declared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = ["EVENTS", "TRIGGERS", "TRIGGER_KEYS", "UTIL_PATTERNS"]

UTIL_PATTERNS: Final[Mapping[str, int]] = {
    "none": 0,
    **{row[0]: row[1] for row in declared.PATTERN_ROWS},
}
"""Pattern numbers by name, as the ``util_pattern`` key and allocation records store them."""
TRIGGERS: Final[Mapping[str, int]] = {
    "now": 0,
    **{name: number for name, number, _param, _doc in declared.TRIGGER_ROWS},
}
"""The ``fault_trigger`` kinds by name (``now`` is not armed)."""
EVENTS: Final[Mapping[str, int]] = dict(declared.EVENT_ROWS)
"""The NVML events a recipe sends, by name: their ``nvmlEventType*`` bit."""
TRIGGER_KEYS: Final = (
    "fault_trigger",
    "fault_trigger_param",
    "fault_trigger_seed",
    "fault_trigger_arm",
)
"""The live keys of a GPU's fault trigger (its kind, parameter and seed, and the tag of the
arm its armed events belong to)."""
