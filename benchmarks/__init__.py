"""The studies: scripts that print figures (`make bench` runs train_engines.py). A package so
that a script's parts import as `benchmarks.NAME` from the bundle's root, ahead of any other
`benchmarks` on the path (benchmarks/gpu_check.py and its gpu_check_*.py)."""
