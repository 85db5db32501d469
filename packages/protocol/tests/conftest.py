"""Shared fixtures of the protocol package's tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (sun_path is limited to 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="nri-", dir="/tmp") as tmp:
        yield Path(tmp)


@pytest.fixture(autouse=True)
def clean_nri_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never inherit a runtime's NRI_PLUGIN_* variables."""
    for name in list(os.environ):
        if name.startswith("NRI_"):
            monkeypatch.delenv(name)
