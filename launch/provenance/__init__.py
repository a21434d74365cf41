"""Provenance: where results came from, carried to another site and checked there.

Owns archives (`archive`: one tar.gz with a run or sweep, its stack and host, a manifest),
their signatures (`signing`: OpenSSH `ssh-keygen -Y`), replaying another site's archive here
(`replay`), what a site expects of an image it pulls (`images`) and which software stack runs
ran on and how two differ (`stacks`).

The highest room below the CLI: imports the shared basics (errors, trust, foreign_env),
launch.ranks, launch.site (the host and software an archive records), launch.runs (replay
starts runs) and launch.results. Of launch.results, `compare` reads archives and `report` the
stacks (results/ sits beside the rooms, see launch/__init__.py).
"""
