"""Disturbance: was a run disturbed while it was timed, and by what?

Owns the sampling of the host around a run (`sample`: /proc read by the process that
already watches the ranks, launch.execute; with `gpu`, nvidia-smi's view of the run's GPUs),
the judgement of what was sampled
(`judge`: each signal's figure, its threshold and a verdict with named causes) and the
step-time series (`steps`). Of the rest of launch/ it imports only the kinds' metrics
(launch.kinds) and a run's samples (launch.results.aggregate); launch.run writes the record
into the result, and sweeps ask `quiet` whether the nodes are quiet before their runs; the readers (tables, report, compare, verdicts,
sweeps, `make bench`) read it from there (launch.results.result.disturbed and friends).
Thresholds and the reasoning behind them: docs/disturbance.md.
"""
