"""``python -m nvml_mock_kwok``: the same ``main`` as the console script."""

import sys

from nvml_mock_kwok.cli import main

sys.exit(main())
