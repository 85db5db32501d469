"""The engine's shared test fixtures, lent to the packages split out of it (nvml-mock-imex,
nvml-mock-node, nvml-mock-smi): the library built from this checkout, board states written
for it, nvidia-ml-py bound to it, the helpers for threads, forks and mount namespaces. Each of
their conftests puts this folder on the path and calls :func:`lend`, so the fixtures are
loaded from the engine's test tree, not copied, and the loading is written once."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ENGINE_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def lend(namespace: dict[str, Any]) -> None:
    """Load the engine's conftest afresh and copy its names into *namespace* (a conftest's
    ``globals()``), so pytest finds its fixtures there and ``from conftest import ...`` works."""
    spec = importlib.util.spec_from_file_location("nvml_engine_conftest", ENGINE_CONFTEST)
    assert spec is not None and spec.loader is not None
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)
    namespace.update({k: v for k, v in vars(engine).items() if not k.startswith("__")})
