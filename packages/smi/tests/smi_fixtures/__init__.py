"""Helpers shared by the ``test_smi_*`` modules (running the tool, reading states)."""
