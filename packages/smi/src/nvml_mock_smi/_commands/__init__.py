"""One module per command of the work-alike; each declares ``COMMANDS`` (see :mod:`.._registry`).

A module here imports only the registry, the options and the errors at import time: the
parser loads every one of them on each run, ``-L`` included, so what a command renders is
imported inside its ``run``.
"""
