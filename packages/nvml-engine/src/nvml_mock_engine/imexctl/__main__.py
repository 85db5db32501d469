"""``python -m nvml_mock_engine.imexctl``: the IMEX control tool work-alike."""

import sys

from nvml_mock_engine.imexctl.cli import main

sys.exit(main())
