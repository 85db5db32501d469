"""``python -m nvml_mock_nri``: the same entry point as the console script."""

import sys

from nvml_mock_nri.cli import main

sys.exit(main())
