"""check-fabric stays light: it runs from the overlay's small runtime in every container."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import check_fabric.cli
heavy = ("pydantic", "yaml", "urllib.request", "http.client", "ssl")
heavy = sorted(m for m in heavy if m in sys.modules)
print(",".join(heavy))
"""


def test_the_default_path_imports_no_heavy_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""
