"""The site: what this cluster and this host offer, and whether a run can start here.

Owns the site file (`config`: one TOML file per cluster, the `Site`), the host probe (`probe`:
facts and per-fabric verdicts), the software a run used (`software`), the MLPerf-style system
description (`system_description`), a fabric profile made concrete for one run on this site
(`fabric_preset`), ELF symbol versions (`elf_versions`) and the checks before a run
(`preflight/`: host and image, fabric truth).

Imports the shared basics (errors, toml_file), launch.kinds, launch.results (a system
description is a typed document), launch.fleet and launch.ranks (the launcher and runtime
registries a site file is checked against, the RunSpec a preset is made for); never launch.plan,
launch.runs or launch.provenance, which build on it.
"""
