"""How a run is started and recorded. Never imports torch or TensorFlow.

Rooms, from the bottom up; a module imports from its own room and the rooms listed before
it, never from one listed after, not even under `if TYPE_CHECKING:`, and no two rooms import
each other (tests/test_architecture.py checks both):

    launch/*.py   shared basics, each used by several rooms: errors (UsageError, the CLI's one
                  line), console (the CLI's and scripts' rich console), toml_file (reading a site
                  or experiment file), shapes (foreign values typed once), trust and foreign_env
                  (the trust boundary every door checks through), schema (the result schema,
                  declared once: its shared fields and shapes, the JSON Schema) and figures (how a
                  figure and its interval read)
    kinds/        the benchmark kinds, one plug-in each: what a kind reads of a run's spec (a
                  Protocol, not the RunSpec), its result fields, figures and plausibility rule
    results/      the record: what a result is and how it is built, stored and checked (the typed
                  result and its loader, assemble, store, transport, plausibility)
    disturbance/  was a run disturbed while it was timed, and by what
    fleet/        the nodes: Slurm, emulated clusters, node names, which node or link is slow
    ranks/        one run's processes: RunSpec, launchers (the emulated one's glue included),
                  container runtimes, keeper, heartbeats
    site/         what a site has: its site file, the host probe, software, fabric presets, preflight
    plan/         an experiment file expanded into RunSpecs, point by point (pure data)
    provenance/   archives, signatures, what a pulled image must be, software stacks
    sharing/      results between sites: signed archives published to and pulled from an OCI registry
    predict/      prediction: the alpha-beta model, a fabric's step time, calibrated clusters, studies
    analysis/     what is computed from many results: aggregate, verdicts, compare, baselines,
                  tables, the report (across sites included)
    runs/         one run end to end, a replay of another site's, and experiments swept point by
                  point (a sweep ends with the verdicts of analysis/, a run with its baseline check)
    cli/          the `fabric-bench` app: options in, a room's function called, its answer printed
"""
