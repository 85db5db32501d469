"""``python -m nvml_mock_engine.smi``: the same ``main`` as the ``nvml-mock-smi`` script."""

import sys

from nvml_mock_engine.smi import main

sys.exit(main())
