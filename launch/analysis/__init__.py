"""What is computed from many results: points aggregated by series (aggregate), verdicts
between fabrics (verdict), comparisons of two result sets or archives (compare), the baseline
history of a key (baseline, metrics), tables (table, report_tables, headline), the report and
its figures (report, report_html, plots), and the section across sites (across_sites*).

It reads results through launch.results (the record) and asks each result's kind
(launch.kinds) for its figures; the predicted answers it shows come from launch.predict.
Consumers decide, producers record: nothing here writes into a result.

May import every room below it (launch/__init__.py): the record, the plan's experiment files,
the archives (provenance) and pulled results, the fleet's locate runs, the predictor."""
