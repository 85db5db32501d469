"""``python -m nvml_mock_imex.imexctl``: the IMEX control tool work-alike."""

import sys

from nvml_mock_imex.imexctl.cli import main

sys.exit(main())
