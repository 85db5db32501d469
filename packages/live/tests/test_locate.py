"""Where the files are: the library's rule (native/src/init.c), one implementation."""

from __future__ import annotations

from pathlib import Path

from nvml_mock_live import locate


def test_state_from_the_env_else_beside_the_library(tmp_path: Path) -> None:
    library = tmp_path / "overlay" / "lib" / "libnvidia-ml.so.1"
    assert locate.state_path(library, {}) == tmp_path / "overlay" / "config" / "state.nvmlmock"
    assert locate.state_path(library, {"MOCK_NVML_CONFIG": "/x/s.nvmlmock"}) == Path(
        "/x/s.nvmlmock"
    )
    assert locate.state_path(None, {}) is None


def test_live_from_the_env_else_beside_the_state() -> None:
    assert locate.live_path("/x/state.nvmlmock", {}) == Path("/x/live.nvmlmock")
    assert locate.live_path("/x/state.nvmlmock", {"MOCK_NVML_LIVE": "/y/l"}) == Path("/y/l")
    assert locate.live_path(None, {}) is None
