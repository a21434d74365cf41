"""What a run leaves and what is read from it: assembling result.json, the store that indexes
results, aggregation, verdicts, tables, the report, the alpha-beta model and predictor, and the
transport and plausibility evidence."""
