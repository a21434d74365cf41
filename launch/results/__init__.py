"""The record: what a result is and how it is built, stored and checked. The typed result and
its one loader (result, over the schema declared once in launch.schema and each kind's fields),
result.json assembled from what each stage recorded (assemble), the store that indexes results
(store), the transport the ranks actually used (transport), the plausibility of the figures
(plausibility), and nccl-tests output read as records (nccl_tests).

Low in launch/ (launch/__init__.py): launch.runs.run writes through it; what is computed from
many results sits above, in launch.analysis and launch.predict. May import launch/'s basics
and launch.kinds (a result's fields and plausibility rule are its kind's)."""
