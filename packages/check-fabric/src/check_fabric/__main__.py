"""``python -m check_fabric``: the same entry point as the ``check-fabric`` console script."""

import sys

from check_fabric.cli import main

sys.exit(main())
