"""How a run is started and recorded. Never imports torch or TensorFlow.

Rooms, from the bottom up; a module imports from its own room and the rooms listed before
it, never from one listed after (tests/test_architecture.py checks it):

    launch/*.py   shared basics, each used by several rooms: errors (UsageError, the CLI's one
                  line), console (the CLI's and scripts' rich console), toml_file (reading a site or experiment file), trust and
                  foreign_env (the trust boundary every door checks through; the fleet's Slurm
                  scripts and the RunSpec already do, so it sits below every room)
    fleet/        the nodes: Slurm, emulated clusters, node names, which node or link is slow
    ranks/        one run's processes: RunSpec, launchers, container runtimes, keeper, heartbeats
    site/         what a site has: its site file, the host probe, software, fabric presets, preflight
    runs/         one run end to end, and experiments swept point by point
    provenance/   archives, replay, signatures, what a pulled image must be, software stacks
    sharing/      results between sites: signed archives published to and pulled from an OCI registry
    cli/          the `fabric-bench` app: options in, a room's function called, its answer printed

results/ (result.json and everything read from it), disturbance/ (was a run disturbed) and
kinds/ (the benchmark kinds, one plug-in each) sit beside the rooms rather than between two of
them: launch.runs.run writes through results/ and disturbance/, the report and comparisons in
results/ read sweeps and archives, and both RunSpec (ranks/) and results/ ask kinds/.
"""
