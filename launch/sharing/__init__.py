"""Sharing: signed results that travel between sites through an OCI registry.

Owns the results artifact's layout and annotations (`artifact`, `annotations`), a small client
of the registry's HTTP API (`registry`), the keys a site trusts and the ones it revoked
(`trusted_keys`), pushing a signed archive (`publish`), listing, pulling, verifying and importing
another site's (`pull`), and the record of what was pulled (`pulled`).

Sits above launch.provenance (it publishes and reads its archives and signatures) and below
launch.cli; imports the shared basics (errors, shapes, trust), launch.provenance and
launch.results (the store it imports into).
"""
