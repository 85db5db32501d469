"""The generated live getters keep each key's signedness, live-only keys included.

``mock.h`` expands one ``live_<key>(d)`` per row of the generated ``LIVE_ONLY_GPU_KEYS``
table. No live-only key is signed today, so the one below is declared in a copy of
``keys.toml``, its ``live_layout.h`` generated as ``live/scripts/gen_keys.py`` generates it, and
the library's own headers (``mock.h``) compiled with it: the getter must be ``int64_t``, clamp
as signed, and answer a negative default as negative.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2]
SCRIPT = PACKAGE.parent / "live" / "scripts" / "gen_keys.py"
SOURCES = PACKAGE / "native" / "src"
SIGNED_ROW = (
    '  { name = "probe_offset", type = "i32", min = -100, max = 100, default = "-7", '
    'board = false, live = 127, nvml = "none", doc = "a signed live-only key (test)" },\n'
)
PROGRAM = """\
#include "mock.h"

#include <stdint.h>

_Static_assert(_Generic(live_probe_offset((const struct nvmlDevice_st *)0), int64_t: 1, default: 0),
               "a signed live-only key has a signed getter");
_Static_assert(_Generic(live_gpu_lost((const struct nvmlDevice_st *)0), uint64_t: 1, default: 0),
               "an unsigned live-only key keeps its unsigned getter");

int main(void)
{
    struct nvmlDevice_st d = {0}; /* no live record: the declared default answers */
    return live_probe_offset(&d) == -7 ? 0 : 1;
}
"""


def _include_dir() -> Path:
    for file in metadata.files("nvidia-nvml-dev") or []:
        if str(file).endswith("include/nvml.h"):
            return Path(str(file.locate())).parent
    pytest.fail("nvidia-nvml-dev is not installed: no nvml.h to compile against")


def test_a_signed_live_only_key_gets_a_signed_getter(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gen_keys
    finally:
        sys.path.pop(0)
    text = (PACKAGE.parent / "live/src/nvml_mock_live/keys.toml").read_text()
    assert "live = [\n" in text
    declaration = tmp_path / "keys.toml"
    declaration.write_text(text.replace("live = [\n", "live = [\n" + SIGNED_ROW, 1))
    keys, layout = gen_keys.load(declaration)
    # the library's headers, with the tables generated from the copy: a header includes its
    # neighbours by quoted name, which finds its own directory before any -I
    generated = tmp_path / "include"
    generated.mkdir()
    for header in SOURCES.glob("*.h"):
        (generated / header.name).write_bytes(header.read_bytes())
    live_h = gen_keys.render_live_h(keys, layout)
    assert "X(probe_offset, 127, 1, -100LL, 100LL, -7LL)" in live_h
    (generated / "live_layout.h").write_text(live_h)
    (generated / "keys.h").write_text(gen_keys.render_keys_h(keys))

    source = tmp_path / "probe.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "probe"
    cc = os.environ.get("CC", "cc")
    built = subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",  # the probe reads no live record, so the live layer's functions fold away
            "-D_POSIX_C_SOURCE=200809L",
            "-pthread",
            "-Wall",
            "-Werror",
            f"-I{generated}",
            f"-I{_include_dir()}",
            str(source),
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(binary)], check=False).returncode == 0
