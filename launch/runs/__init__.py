"""Runs: one run end to end, and many of them.

Owns a single run (`run`: RunSpec -> plan -> command -> processes -> rank records ->
result.json, preflight and disturbance included), replaying another site's archive here
(`replay`), the points an experiment leaves out (`dropped`) and sweeps (`sweep`: every point of
an experiment, resumably; `sweep_state`: the sweep directory's index). The experiment file
itself is launch.plan's.

The highest room below the CLI: imports every room below (launch/__init__.py), launch.results
and launch.disturbance to write a run's result and disturbance record, launch.analysis for a
sweep's closing verdicts and a run's baseline check. Only launch.cli builds on it.
"""
