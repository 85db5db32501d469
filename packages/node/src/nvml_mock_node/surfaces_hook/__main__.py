"""``python -m nvml_mock_node.surfaces_hook``: the overlay's ``bin/nvml-mock-surfaces-hook``."""

import sys

from nvml_mock_node.surfaces_hook import main

sys.exit(main())
