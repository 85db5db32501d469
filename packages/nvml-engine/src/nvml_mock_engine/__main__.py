"""``python -m nvml_mock_engine``: the same command as the ``nvml-mock-engine`` script."""

import sys

from nvml_mock_engine.cli import main

sys.exit(main())
