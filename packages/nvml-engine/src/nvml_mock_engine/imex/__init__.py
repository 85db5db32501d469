"""The IMEX daemon work-alike's domain layer: its config file, node list, peer wire and the
status layouts of ``nvidia-imex-ctl``. The front doors are :mod:`nvml_mock_engine.imexd`
(``nvidia-imex``) and :mod:`nvml_mock_engine.imexctl` (``nvidia-imex-ctl``)."""
