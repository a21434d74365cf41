"""The `fabric-bench` command line: the typer app (app.py) and one module per command or group."""
