"""The ranks: what one run is and how its processes are started, held, watched and stopped.

Owns the RunSpec (`runspec`: every field of a run, validated), the registries of launchers
(`launchers`: local, mpirun, srun, sbatch, emulated; the Command that starts every rank) and of
container runtimes (`runtimes`), an emulated cluster's glue to a run (`emulated`: which cluster,
its mpirun arguments, its environment), the Command itself (`command`), the libraries' transport
reporting every rank's environment carries (`reporting`), running a Command under a keeper
(`execute`, `keeper`: `python -m launch.ranks.keeper`), stop signals as requests (`interrupt`)
and reading the ranks' heartbeats (`heartbeat`).

Imports the shared basics (errors, trust), launch.kinds and launch.fleet (Slurm, emulated
clusters); nothing of a site, a result or a sweep: launch.runs puts a run together from these
parts. The launchers read a RunSpec through a Protocol (launchers.LaunchedSpec), since RunSpec
validates against their registry.
"""
