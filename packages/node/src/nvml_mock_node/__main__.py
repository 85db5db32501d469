"""``python -m nvml_mock_node``: ``nvml-mock-engine`` with this package's commands.

An installed package registers ``stage`` and ``agent`` through an entry point; a source tree
on ``PYTHONPATH`` has no install to record it, so this names them itself.
"""

import sys

from nvml_mock_engine.cli import main

from nvml_mock_node.commands import AGENT, STAGE

sys.exit(main(extra=(STAGE, AGENT)))
