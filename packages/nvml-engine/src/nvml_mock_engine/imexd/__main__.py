"""``python -m nvml_mock_engine.imexd``: the IMEX daemon work-alike."""

import sys

from nvml_mock_engine.imexd.cli import main

sys.exit(main())
