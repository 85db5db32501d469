"""``python -m nvml_mock_smi``: the same ``main`` as the ``nvml-mock-smi`` script."""

import sys

from nvml_mock_smi import main

sys.exit(main())
