"""Writing the overlay's small files so that no reader ever sees a partial one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(
    path: Path, data: bytes, mode: int = 0o644, *, before_replace: Callable[[], None] | None = None
) -> None:
    """Write *data* to *path* through a temporary file beside it and a rename: never a partial
    file. *before_replace* runs once the new file is complete, just before it takes the name
    (the live layer retires the file it replaces there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
