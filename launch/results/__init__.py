"""What a run leaves and what is read from it: assembling result.json, the store that indexes
results, aggregation, verdicts, tables, the report, the alpha-beta model and predictor, and the
transport and plausibility evidence.

Beside launch/'s rooms rather than between two of them (launch/__init__.py): launch.runs.run
writes through assemble, store, transport and plausibility; the report, verdicts and
comparisons read what the rooms above made (sweeps' experiment files, archives, stacks).
The architecture test checks its modules for cycles, not for a room order."""
