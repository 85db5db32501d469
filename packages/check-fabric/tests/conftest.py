"""Shared fixtures: a clean environment for every test."""

from __future__ import annotations

import os

import pytest

_PREFIXES = ("CHECK_FABRIC_", "NVML_MOCK_", "MOCK_")
_NAMES = ("NODE_NAME",)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the caller's check-fabric, mock or node settings."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES) or name in _NAMES:
            monkeypatch.delenv(name)
