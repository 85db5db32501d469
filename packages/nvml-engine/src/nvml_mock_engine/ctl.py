"""The ``nvml-mock-ctl`` command: change a node's mock GPUs while processes use them.

Scripts call ``nvml-mock-ctl status`` and ``xid`` in loops, so the command starts light: this
module imports nothing beyond the interpreter's own start-up and the protocol's names, and
:func:`main` hands the plain forms of those two verbs to the quick path
(:mod:`nvml_mock_engine.ctl_quick`: a hand-written reader of exactly their flags, the live
file read and written through the live package's own light primitives and the mock
library's). Every other verb, ``--help``, ``--version``, an abbreviated or unknown flag and
every refusal go to the full command line (:mod:`nvml_mock_engine.ctl_cli`, on
``argparse``), so each message and exit code has one author whichever path starts.

Exit codes: 0 done, 1 the live layer cannot be opened or written (the message says why:
missing, not staged, read-only), 2 usage error, 3 a value refused (nothing written).
"""

from __future__ import annotations

import sys

from nvml_mock_protocol.names import ENV_MOCK_NVML_CONFIG as ENV_STATE_FILE
from nvml_mock_protocol.names import ENV_MOCK_NVML_LIVE as ENV_LIVE_FILE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

__all__ = [
    "ENV_LIVE_FILE",
    "ENV_STATE_FILE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_VALUE",
    "main",
]

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_VALUE: Final = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    from nvml_mock_engine import ctl_quick

    code = ctl_quick.run(args)
    if code is not None:
        return code
    from nvml_mock_engine import ctl_cli

    return ctl_cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
