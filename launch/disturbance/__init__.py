"""Disturbance: was a run disturbed while it was timed, and by what?

Owns the sampling of the host around a run (`sample`: /proc read by the process that
already watches the ranks, launch.ranks.execute; with `gpu`, nvidia-smi's view of the run's
GPUs), under Slurm the same on every node of the run (`nodes`: one sampler task per node
attached to the ranks' job) with each node's link shaper (`link`), the judgement of what was sampled (`judge`: each signal's figure, its threshold and a
verdict with named causes), the step-time series (`steps`) and the check before a sweep or a
locate (`quiet`). Of the rest of launch/ it imports only the kinds (launch.kinds: their figures and own
bytes) and the typed result (launch.results.result); launch.runs.run writes the record into the result,
launch.runs.sweep and launch.fleet.locate ask `quiet`, so it sits below launch.fleet; the readers
(tables, report, compare, verdicts, sweeps, `make bench`) read it from there
(launch.results.result.disturbed and friends).
Thresholds and the reasoning behind them: docs/disturbance.md.
"""
