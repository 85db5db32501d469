"""How uvicorn's loggers join the service's one log handler.

The handler and the line shape are the shared ones (``nvml_mock_protocol.logs``,
installed once by ``main``). uvicorn would otherwise install handlers and
formats of its own through its ``log_config``; this one only sets the levels
of its loggers and lets their records propagate to the root handler, so that
server and access lines look like every other nvml-mock line.
"""

from __future__ import annotations

from typing import Any

__all__ = ["uvicorn_log_config"]


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's ``log_config``: its loggers propagate to our root handler, nothing else."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level.upper(), "handlers": [], "propagate": True},
        },
    }
