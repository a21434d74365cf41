"""Provenance: where results came from, carried to another site and checked there.

Owns archives (`archive`: one tar.gz with a run or sweep, its stack and host, a manifest),
their signatures (`signing`: OpenSSH `ssh-keygen -Y`), what a site expects of an image it pulls
(`images`: reference files and the check after a pull; building and moving images is
containers/'s) and which software stack runs ran on and how two differ (`stacks`). Replaying an
archive starts runs, so it is launch.runs.replay.

Imports the shared basics (errors, trust, foreign_env), launch.ranks, launch.site (the host and
software an archive records) and launch.results (the results an archive carries). Above it,
launch.sharing publishes its archives, launch.analysis compares them (`compare`) and reports
their stacks (`report`), launch.runs replays them.
"""
