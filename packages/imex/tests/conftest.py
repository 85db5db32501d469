"""The engine's shared test fixtures serve this package's tests too, lent by the engine's test
tree (``nvml-engine/tests/lending``) rather than copied; ``from conftest import ...`` finds
them here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2] / "nvml-engine" / "tests" / "lending"))
from engine_fixtures import lend

lend(globals())
