"""The engine's shared test fixtures serve this package's tests too: the library built from
this checkout, board states written for it, nvidia-ml-py bound to it, the helpers for
threads, forks and mount namespaces. They are loaded from the engine's test tree, not
copied, so that there is one of each; ``from conftest import ...`` finds them here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ENGINE_CONFTEST = Path(__file__).resolve().parents[2] / "nvml-engine" / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("nvml_engine_conftest", _ENGINE_CONFTEST)
assert _spec is not None and _spec.loader is not None
_engine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_engine)
globals().update({k: v for k, v in vars(_engine).items() if not k.startswith("__")})
