"""Runs: one run end to end, and many of them.

Owns a single run (`run`: RunSpec -> plan -> command -> processes -> rank records ->
result.json, preflight and disturbance included), experiment files (`experiment`: a matrix
in TOML expanded into RunSpecs) and sweeps (`sweep`: every point of an experiment, resumably;
`sweep_state`: the sweep directory's index).

Imports the shared basics, launch.fleet, launch.ranks, launch.site, and launch.results and
launch.disturbance (a run writes its result and disturbance record through them). Only
launch.provenance (replay) and launch.cli build on it.
"""
