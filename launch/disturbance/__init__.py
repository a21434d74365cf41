"""Disturbance: was a run disturbed while it was timed, and by what?

Owns the sampling of the host around a run (`sample`: /proc read by the process that
already watches the ranks, launch.execute), the judgement of what was sampled
(`judge`: each signal's figure, its threshold and a verdict with named causes) and the
step-time series (`steps`). It imports nothing from the rest of launch/ but the result
helpers (launch.results.result); launch.run writes the record into the result, and the
readers (tables, report, compare, verdicts, sweeps, `make bench`) read it from there.
Thresholds and the reasoning behind them: docs/disturbance.md.
"""
