"""``python -m nvml_mock_imex.imexd``: the IMEX daemon work-alike."""

import sys

from nvml_mock_imex.imexd.cli import main

sys.exit(main())
