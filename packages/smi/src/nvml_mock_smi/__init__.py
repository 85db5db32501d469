"""``nvml-mock-smi``: an ``nvidia-smi`` work-alike over whatever ``libnvidia-ml.so.1`` loads.

It is installed as ``bin/nvidia-smi`` in the overlay, so workloads see the usual tool; it
reads GPUs only through NVML, so the same command runs against the mock library and against
a real driver. Start-up cost matters (scripts call ``nvidia-smi -L`` in loops): this module
imports nothing heavy, and each mode loads only the modules it renders.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    from ._errors import SmiError
    from ._options import parse

    args = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout
    handle = None
    try:
        options = parse(args, os.environ)
        if options.filename:
            try:
                handle = open(options.filename, "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise SmiError(
                    f"Failed to open file {options.filename}: {exc.strerror}", 2
                ) from None
            out = handle
        from ._app import run

        def write(text: str) -> None:
            out.write(text)
            out.flush()

        return run(options, write)
    except SmiError as exc:
        sys.stdout.write(exc.message + "\n")
        sys.stdout.flush()
        return exc.exit_code
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        if handle is not None:
            handle.close()
