"""Generate (or check) the committed protobuf code of nvml-mock-protocol.

The generated modules are committed so that installing the package needs no
protoc. This script is the only way they are produced, with the generator
pinned in ``gen-requirements.txt``; ``--check`` regenerates into a temporary
directory and fails on any difference, so a hand edit or a stale file cannot
slip through (tox env ``proto-check``).

Sources (``proto/``) and outputs (``src/nvml_mock_protocol/nri/``):

- ``nri/v1alpha1/api.proto`` -> ``api_pb2.py`` / ``.pyi``. Written from the
  wire contract of containerd/nri ``pkg/api/api.proto`` (v0.12.x field
  numbers, checked against tag v0.12.2); protobuf package
  ``nri.pkg.api.v1alpha1`` as on the wire.
- ``nri/ttrpc.proto`` -> ``ttrpc_pb2.py`` / ``.pyi``: the ttrpc envelope.

Usage: ``python scripts/gen_proto.py [--check]`` from anywhere.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = PACKAGE_ROOT / "proto"
SRC_ROOT = PACKAGE_ROOT / "src"
OUT_DIR = Path("nvml_mock_protocol") / "nri"

# (protoc include arguments, input file relative to PROTO_ROOT). The API file
# lives under v1alpha1/ like its upstream path but is mapped to
# nvml_mock_protocol/nri/api.proto so the module is nvml_mock_protocol.nri.api_pb2.
JOBS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (f"-I{OUT_DIR.as_posix()}={PROTO_ROOT / OUT_DIR / 'v1alpha1'}",),
        "nvml_mock_protocol/nri/v1alpha1/api.proto",
    ),
    ((f"-I{PROTO_ROOT}",), "nvml_mock_protocol/nri/ttrpc.proto"),
)
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "ttrpc_pb2.py", "ttrpc_pb2.pyi")


def generate(out_root: Path) -> None:
    """Run protoc for every job, writing below ``out_root``."""
    try:
        from grpc_tools import protoc  # noqa: F401
    except ImportError:
        sys.exit("grpcio-tools is not installed: pip install -r gen-requirements.txt")
    for includes, source in JOBS:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            *includes,
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            str(PROTO_ROOT / source),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            sys.exit(f"protoc failed for {source}:\n{result.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="regenerate into a temp dir and fail on drift"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nvml-mock-proto-") as tmp:
        tmp_root = Path(tmp)
        generate(tmp_root)
        drift = []
        for name in OUTPUTS:
            fresh = tmp_root / OUT_DIR / name
            committed = SRC_ROOT / OUT_DIR / name
            if not fresh.is_file():
                sys.exit(f"protoc did not produce {OUT_DIR / name}")
            if args.check:
                if not committed.is_file() or not filecmp.cmp(fresh, committed, shallow=False):
                    drift.append(str(OUT_DIR / name))
            else:
                committed.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(fresh, committed)
        if drift:
            print(
                "generated protobuf code is out of date: "
                + ", ".join(drift)
                + "\nrun: python packages/protocol/scripts/gen_proto.py",
                file=sys.stderr,
            )
            return 1
    print("protobuf code " + ("up to date" if args.check else "generated"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
