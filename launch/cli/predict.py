"""`fabric-bench predict`: scaling of a measured training step on fabrics (launch.results.predict)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer

from launch.console import console as make_console
from launch.errors import UsageError

DEFAULT_RANKS = ",".join(str(2 ** k) for k in range(11))  # 1 .. 1024


def _read(path: Path, what: str) -> dict:
    from launch.results.result import read as load_result

    if path.is_dir():
        path = path / "result.json"
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such result.json")
    return load_result(path)


def predict(
    train: Path = typer.Option(..., help="a train result.json (or its run directory): compute_img_per_s, "
                                         "gradient_bytes, batch size, engine settings"),
    allreduce: list[Path] = typer.Option([], help="allreduce result(s) to fit a fabric's alpha-beta on (repeatable)"),
    fabric: Optional[str] = typer.Option(None, help="the fabric the --allreduce result must have run on"),
    link: list[str] = typer.Option([], help="a nominal fabric NAME=GBIT_PER_S[,LATENCY_US] (repeatable)"),
    nominal: bool = typer.Option(False, help="add the nominal presets (25GbE, Omni-Path 100, InfiniBand HDR 200, "
                                             "EFA 4x100, Slingshot 200); the default with no other fabric"),
    ranks: str = typer.Option(DEFAULT_RANKS, help="rank counts, comma-separated"),
    engine: Optional[str] = typer.Option(None, help="ddp | horovod (default: the train result's)"),
    bucket_mb: Optional[float] = typer.Option(None, help="DDP bucket cap / Horovod fusion threshold in MiB "
                                                         "(default: the result's engine settings, else 25 / 128)"),
    cycle_ms: Optional[float] = typer.Option(None, help="Horovod cycle time (default: the result's, else 1 ms)"),
    backward_share: float = typer.Option(2 / 3, help="share of the compute step that is the backward pass "
                                                      "(an assumption; gradients overlap with it)"),
    host_overhead_from: Optional[Path] = typer.Option(
        None, help="a multi-rank train result on a fast (e.g. unshaped) link: its step minus its compute step is "
                   "the host's own cost of the exchange, taken from the compute where they share cores; "
                   "DDP adds it in series, Horovod spreads it over the wire time (launch.results.predict)"),
    host_overhead_ms: float = typer.Option(0.0, help="the host's cost of the exchange per step at 2 ranks, "
                                                     "if known otherwise (ms)"),
    fit_min_bytes: int = typer.Option(8 * 2**20, help="fit the alpha-beta on allreduce rows of at least this size"),
    output: Optional[Path] = typer.Option(None, help="directory for predict.json (every input) and predict.png"),
    as_json: bool = typer.Option(False, "--json", help="print predict.json instead of the table"),
):
    """Predict step time, throughput and scaling efficiency for N = 1 ... 1024 ranks.

    From a measured compute step (a train result's compute-only throughput), its
    gradient bytes, and an alpha-beta model per fabric: fitted on an allreduce
    result, or nominal (--link, --nominal presets: labelled nominal, not measured).
    DDP's buckets / Horovod's fusion cycles overlap the allreduces with the
    backward pass; the overlap-free bound is printed beside it.

    Examples:
      fabric-bench predict --train results/RUN --nominal --output predict/
      fabric-bench predict --train results/RUN --allreduce results/AR --fabric emu-eth-1g --ranks 1,2,4,8
      fabric-bench predict --train results/RUN --link 10GbE=10,20 --link 100GbE=100,5
    """
    from launch.results import predict as model

    rank_counts = model.parse_ranks(ranks)
    workload = model.workload_from(_read(train, "--train"), engine, bucket_mb, cycle_ms, backward_share)
    if host_overhead_ms < 0:
        raise UsageError(f"--host-overhead-ms must be >= 0, got {host_overhead_ms}")
    if host_overhead_from is not None:
        overhead, at_ranks = model.host_overhead_from(_read(host_overhead_from, "--host-overhead-from"))
        workload = dataclasses.replace(workload, host_overhead_s=overhead, host_overhead_ranks=at_ranks)
    elif host_overhead_ms:
        workload = dataclasses.replace(workload, host_overhead_s=host_overhead_ms / 1e3)
    fabrics = []
    for path in allreduce:
        result = _read(path, "--allreduce")
        ran_on = model.result_fabric(result)
        if fabric is not None and ran_on != fabric:
            raise UsageError(f"--allreduce {path}: ran on fabric {ran_on or 'none'}, not {fabric!r} as --fabric asks")
        fabrics.append(model.fabric_from_allreduce(result, min_bytes=fit_min_bytes))
    fabrics += [model.parse_link(text) for text in link]
    if nominal or not fabrics:
        fabrics += list(model.NOMINAL.values())
    data = model.predict(workload, fabrics, rank_counts)
    if output is not None:
        from launch.results.predict_plot import write

        write(data, output)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    print_table(data)
    if output is not None:
        print(f"{output / 'predict.json'} (every input), {output / 'predict.png'}")


def print_table(data: dict) -> None:
    from rich.table import Table

    w = data["workload"]
    console = make_console()
    bucket = "bucket cap" if w["engine"] == "ddp" else "fusion threshold"
    console.print(f"workload: {w['engine']}, batch {w['batch_size']}/rank, compute step "
                  f"{w['compute_step_s'] * 1e3:.1f} ms (from {w['source']['run_id']}, measured with "
                  f"{w['source']['world_size']} rank(s) on its host), gradients {w['gradient_bytes'] / 2**20:.1f} MiB, "
                  f"{bucket} {w['bucket_bytes'] / 2**20:g} MiB"
                  + (f", cycle {w['cycle_s'] * 1e3:g} ms" if w["engine"] == "horovod" else "")
                  + f", backward share {w['backward_share']:.2f} (assumed)"
                  + (f", host exchange cost {w['host_overhead_s'] * 1e3:.1f} ms at {w['host_overhead_ranks']} ranks "
                     f"({data['points'][0]['host_rule']}, see `predict --help`)" if w["host_overhead_s"] else ""),
                  highlight=False)
    for f in data["fabrics"]:
        console.print(f"fabric {f['name']}: alpha {f['alpha_s'] * 1e6:.1f} us, {f['bandwidth_gbit_s']:g} Gbit/s "
                      f"({f['source']})", highlight=False)
    table = Table(title="predicted scaling (overlapped; no-overlap bound beside)")
    for column in ("fabric", "ranks", "step ms", "no-overlap ms", "img/s", "efficiency", "no-overlap eff."):
        table.add_column(column, justify="left" if column == "fabric" else "right")
    for p in data["points"]:
        table.add_row(p["fabric"], str(p["ranks"]), f"{p['step_s'] * 1e3:.1f}", f"{p['step_no_overlap_s'] * 1e3:.1f}",
                      f"{p['img_per_s']:.1f}", f"{p['scaling_efficiency']:.2f}",
                      f"{p['scaling_efficiency_no_overlap']:.2f}")
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
