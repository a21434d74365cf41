"""The fleet: the nodes a run spans and how they are reached.

Owns Slurm around a run (`slurm`: job facts, cancelling, node counts, job scripts, time
limits; `sbatch_wait`: submitting a job script and waiting for its job), emulated clusters (`emulate/`: nodes as network namespaces on this machine), the
shape of node and interface names (`node_names`), and finding the slow node or link of an
allocation (`locate/`) with what a sweep then leaves out (`located`).

Imports the shared basics at the top of launch/ (errors, trust) and launch.disturbance (locate's
quiet check); never launch.ranks: a run's glue to an emulated cluster reads a RunSpec, so it is
launch.ranks.emulated. Every room above may import it (the launchers start ranks across it, the
site file names its nodes and scheduler).
"""
