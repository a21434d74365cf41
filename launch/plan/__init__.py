"""The plan: an experiment file read, checked and expanded into RunSpecs, point by point (pure
data: nothing runs here). launch.runs sweeps the points; launch.analysis.verdict reads the
order of the values an experiment varied, so the plan sits below both.

May import launch/'s basics, kinds/, results/, fleet/, ranks/ and site/ (launch/__init__.py)."""
