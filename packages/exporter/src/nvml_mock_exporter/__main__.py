"""``python -m nvml_mock_exporter``: the same entry point as the console script."""

import sys

from nvml_mock_exporter.cli import main

if __name__ == "__main__":
    sys.exit(main())
