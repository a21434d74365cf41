"""`fabric-bench predict`: scaling of a measured training step on fabrics (launch.predict.predict)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import typer

from launch.console import console as make_console
from launch.errors import UsageError
from launch.shapes import rich_text

if TYPE_CHECKING:  # read at use: the CLI starts without the results modules
    from launch.results.result import Result

DEFAULT_RANKS = ",".join(str(2**k) for k in range(11))  # 1 .. 1024


def _read(path: Path, what: str) -> Result:
    from launch.results.result import read as load_result

    if path.is_dir():
        path = path / "result.json"
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such result.json")
    return load_result(path)


def predict(
    train: Optional[Path] = typer.Option(
        None,
        help="a train result.json (or its run directory): compute_img_per_s, "
        "gradient_bytes (the wire dtype's), batch size, buckets",
    ),
    allreduce: list[Path] = typer.Option([], help="allreduce result(s) to fit a fabric's alpha-beta on (repeatable)"),
    fabric: Optional[str] = typer.Option(None, help="the fabric the --allreduce result must have run on"),
    link: list[str] = typer.Option([], help="a nominal fabric NAME=GBIT_PER_S[,LATENCY_US] (repeatable)"),
    nominal: bool = typer.Option(
        False,
        help="add the nominal presets (25GbE, Omni-Path 100, InfiniBand HDR 200, "
        "EFA 4x100, Slingshot 200); the default with no other fabric",
    ),
    ranks: str = typer.Option(DEFAULT_RANKS, help="rank counts, comma-separated"),
    engine: Optional[str] = typer.Option(None, help="ddp | horovod (default: the train result's)"),
    bucket_mb: Optional[float] = typer.Option(
        None,
        help="DDP bucket cap / Horovod fusion threshold in MiB (default: the result's engine settings, else 25 / 128)",
    ),
    cycle_ms: Optional[float] = typer.Option(None, help="Horovod cycle time (default: the result's, else 1 ms)"),
    backward_share: float = typer.Option(
        2 / 3, help="share of the compute step that is the backward pass (an assumption; gradients overlap with it)"
    ),
    host_overhead_from: Optional[Path] = typer.Option(
        None,
        help="a multi-rank train result on a fast (e.g. unshaped) link: its step minus its compute step is "
        "the host's own cost of the exchange, taken from the compute where they share cores; "
        "DDP adds it in series, Horovod spreads it over the wire time (launch.predict.predict)",
    ),
    host_overhead_ms: float = typer.Option(
        0.0, help="the host's cost of the exchange per step at 2 ranks, if known otherwise (ms)"
    ),
    fit_min_bytes: int = typer.Option(8 * 2**20, help="fit the alpha-beta on allreduce rows of at least this size"),
    output: Optional[Path] = typer.Option(None, help="directory for predict.json (every input) and predict.png"),
    as_json: bool = typer.Option(False, "--json", help="print predict.json instead of the table"),
    node_type: Optional[str] = typer.Option(
        None,
        help="cluster mode: the node preset (dgx-1-v100, hgx-a100, "
        "hgx-h100, hgx-h200, hgx-b200, pcie4-8, ...; launch.predict.cluster)",
    ),
    intra: Optional[str] = typer.Option(
        None, help="cluster mode: the intra-node level, a node preset or GBIT_PER_GPU[,LATENCY_US[-HIGH]]"
    ),
    gpus_per_node: Optional[int] = typer.Option(None, help="cluster mode: GPUs per node (default: the preset's)"),
    inter: list[str] = typer.Option(
        [],
        help="cluster mode: a network preset (ib-ndr-8x400, roce-8x400, tcp-200, "
        "tcp-100, ...) or RAILSxGBIT[,FRACTION[-HIGH]][,LATENCY_US[-HIGH]][,tcp] "
        "(repeatable: one cluster each)",
    ),
    cluster_file: list[Path] = typer.Option([], help="cluster mode: a site's cluster description (JSON; repeatable)"),
    probe_json: Optional[Path] = typer.Option(
        None,
        help="cluster mode: a node's `fabric-bench probe --json` report: "
        "GPUs and NVLink from its topo -m, rails and rate from its "
        "active RDMA ports (else up NICs, TCP)",
    ),
    library: str = typer.Option("nccl", help="cluster mode: nccl | gloo | mpi (which decides the algorithm)"),
    algorithm: str = typer.Option(
        "auto", help="cluster mode: auto (the library's choice) | ring | tree | hierarchical-ring | halving-doubling"
    ),
    nccl_log: Optional[Path] = typer.Option(
        None, help="cluster mode: a run's NCCL log; the algorithm it names is used"
    ),
    nodes: Optional[str] = typer.Option(None, help="cluster mode: node counts, comma-separated (default 1,2,4,...,64)"),
    calibrate_from: Optional[Path] = typer.Option(
        None,
        help="cluster mode: a measured multi-rank train result on this cluster: its step fits the "
        "non-network term (per-step overhead, overlap efficiency); without it the prediction is "
        "uncalibrated and shows the band the term spans",
    ),
    study: Optional[str] = typer.Option(
        None, help="a study instead of a train result: hpec2020-today (launch.predict.study)"
    ),
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
    from launch.predict import predict as model

    if study is not None:
        return run_study(study, node_type or "hgx-h100", output, as_json)
    if train is None:
        raise UsageError("give --train RESULT (a measured training step) or --study NAME")
    rank_counts = model.parse_ranks(ranks)
    workload = model.workload_from(_read(train, "--train"), engine, bucket_mb, cycle_ms, backward_share)
    if node_type or intra or inter or cluster_file or probe_json:
        return run_cluster(
            workload,
            node_type,
            intra,
            gpus_per_node,
            inter,
            cluster_file,
            library,
            algorithm,
            nccl_log,
            nodes,
            calibrate_from,
            output,
            as_json,
            probe_json,
        )
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
    _emit(model.predict(workload, fabrics, rank_counts), output, as_json, print_table)


def _emit(data: dict, output: Optional[Path], as_json: bool, table: Callable[[dict], None]) -> None:
    """A prediction written (OUTPUT/predict.json, predict.png), then printed as JSON or a table."""
    if output is not None:
        from launch.predict.predict_plot import write

        write(data, output)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table(data)
    if output is not None:
        print(f"{output / 'predict.json'} (every input), {output / 'predict.png'}")


def print_table(data: dict) -> None:
    from rich.table import Table

    w = data["workload"]
    console = make_console()
    bucket = "bucket cap" if w["engine"] == "ddp" else "fusion threshold"
    console.print(  # run ids and fabric names are another site's words: shown, never markup
        rich_text(
            f"workload: {w['engine']}, batch {w['batch_size']}/rank, compute step "
            f"{w['compute_step_s'] * 1e3:.1f} ms (from {w['source']['run_id']}, measured with "
            f"{w['source']['world_size']} rank(s) on its host), gradients {w['gradient_bytes'] / 2**20:.1f} MiB, "
            f"{bucket} {w['bucket_bytes'] / 2**20:g} MiB"
            + (f", cycle {w['cycle_s'] * 1e3:g} ms" if w["engine"] == "horovod" else "")
            + f", backward share {w['backward_share']:.2f} (assumed)"
            + (
                f", host exchange cost {w['host_overhead_s'] * 1e3:.1f} ms at {w['host_overhead_ranks']} ranks "
                f"({data['points'][0]['host_rule']}, see `predict --help`)"
                if w["host_overhead_s"]
                else ""
            )
        ),
        highlight=False,
    )
    for f in data["fabrics"]:
        console.print(
            rich_text(
                f"fabric {f['name']}: alpha {f['alpha_s'] * 1e6:.1f} us, {f['bandwidth_gbit_s']:g} Gbit/s ({f['source']})"
            ),
            highlight=False,
        )
    table = Table(title="predicted scaling (overlapped; no-overlap bound beside)")
    for column in ("fabric", "ranks", "step ms", "no-overlap ms", "img/s", "efficiency", "no-overlap eff."):
        table.add_column(column, justify="left" if column == "fabric" else "right")
    for p in data["points"]:
        table.add_row(
            rich_text(p["fabric"]),
            str(p["ranks"]),
            f"{p['step_s'] * 1e3:.1f}",
            f"{p['step_no_overlap_s'] * 1e3:.1f}",
            f"{p['img_per_s']:.1f}",
            f"{p['scaling_efficiency']:.2f}",
            f"{p['scaling_efficiency_no_overlap']:.2f}",
        )
    console.print(table)


def run_cluster(
    workload,
    node_type,
    intra,
    gpus_per_node,
    inter,
    cluster_files,
    library,
    algorithm,
    nccl_log,
    nodes,
    calibrate_from,
    output,
    as_json,
    probe_json=None,
) -> None:
    """The cluster predictor (launch.predict.predict_cluster): one cluster per network."""
    from launch.predict import cluster as clusters
    from launch.predict import collectives, predict_cluster
    from launch.predict.predict import parse_ranks
    from launch.results.result import fields_of
    from launch.schema import at, number

    if nccl_log is not None:
        try:
            named = collectives.algorithm_from_nccl_log(nccl_log.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise UsageError(f"--nccl-log {nccl_log}: {exc.strerror}") from None
        if named is None:
            raise UsageError(
                f"--nccl-log {nccl_log}: names no ring or tree algorithm (NCCL_DEBUG=INFO with "
                "NCCL_DEBUG_SUBSYS=TUNING, or NCCL_ALGO, shows it)"
            )
        algorithm = named
    level = clusters.parse_intra(intra or node_type or "hgx-h100", gpus_per_node)
    built = [
        clusters.checked(
            clusters.Cluster(
                f"{intra or node_type or 'hgx-h100'} + {text}", level, clusters.parse_inter(text), library, algorithm
            )
        )
        for text in inter
    ]
    built += [clusters.from_site_file(path) for path in cluster_files]
    if probe_json is not None:
        probed_intra, probed_inter = clusters.from_probe_report(probe_json)
        built.append(
            clusters.checked(
                clusters.Cluster(f"probed {probe_json.name}", probed_intra, probed_inter, library, algorithm)
            )
        )
    if not built:
        raise UsageError(
            "cluster mode needs a network: --inter PRESET|RAILSxGBIT..., --cluster-file FILE or --probe-json FILE"
        )
    node_counts = parse_ranks(nodes) if nodes else [1, 2, 4, 8, 16, 32, 64]
    nonnet = None
    if calibrate_from is not None:
        measured = fields_of(_read(calibrate_from, "--calibrate-from"))
        per_rank = number(at(measured, "throughput.per_rank_img_per_s"))
        if not per_rank or (measured.world_size or 1) < 2:
            raise UsageError(f"--calibrate-from {calibrate_from}: a multi-rank train result with throughput is needed")
        nonnet = predict_cluster.calibrate(
            workload, built[0], measured.world_size or 2, workload.batch_size / per_rank, measured.run_id
        )
    ranks_list = sorted({n * c.gpus_per_node for c in built for n in node_counts})
    _emit(predict_cluster.predict(workload, built, ranks_list, nonnet), output, as_json, print_cluster_table)


def print_cluster_table(data: dict) -> None:
    from rich.table import Table

    console = make_console()
    w = data["workload"]
    console.print(
        f"workload: {w['engine']}, batch {w['batch_size']}/rank, compute step {w['compute_step_s'] * 1e3:.1f} ms, "
        f"gradients {w['gradient_bytes'] / 2**20:.1f} MiB on the wire, buckets {w['bucket_bytes'] / 2**20:g} MiB",
        highlight=False,
    )
    for c in data["clusters"]:
        i, n = c["intra"], c["inter"]
        console.print(  # a cluster file's names are words from a file: shown, never markup
            rich_text(
                f"cluster {c['name']}: {c['gpus_per_node']} GPUs/node, {i['name']} {i['gbit_s']:g} Gbit/s/GPU; "
                f"{n['name']}, achievable {n['fraction'][0]:g}-{n['fraction'][1]:g}, latency "
                f"{n['latency_us'][0]:g}-{n['latency_us'][1]:g} us ({n['source']}); {c['library']}, "
                f"algorithm {c['algorithm']}"
            ),
            highlight=False,
        )
    nn = data["non_network"]
    console.print(
        rich_text(("CALIBRATED: " if nn["calibrated"] else "UNCALIBRATED (no --calibrate-from): ") + nn["source"]),
        highlight=False,
    )
    table = Table(title="predicted scaling, mid [range]")
    for column in ("cluster", "nodes", "ranks", "step ms", "img/s", "efficiency", "network only", "algorithm"):
        table.add_column(column, justify="left" if column in ("cluster", "algorithm") else "right")
    for p in data["points"]:
        lo, hi = p["step_s_range"]
        e_lo, e_hi = p["scaling_efficiency_range"]
        table.add_row(
            rich_text(p["cluster"]),
            str(p["nodes"]),
            str(p["ranks"]),
            f"{p['step_s'] * 1e3:.1f} [{lo * 1e3:.1f}-{hi * 1e3:.1f}]",
            f"{p['img_per_s']:.0f}",
            f"{p['scaling_efficiency']:.2f} [{e_lo:.2f}-{e_hi:.2f}]",
            f"{p['network_only_efficiency']:.2f}",
            ",".join(sorted(p["algorithms"])) or "-",
        )
    console.print(table)


def run_study(name: str, node_type: str, output, as_json: bool) -> None:
    from launch.predict import study as studies

    data = studies.run(name, node_type)
    if output is not None:
        from launch.predict.predict_plot import write_study

        write_study(data, output)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    from rich.table import Table

    console = make_console()
    console.print(f"study {data['study']} on {data['node_type']} nodes: {data['question']}", highlight=False)
    for m in data["models"]:
        console.print(
            f"  {m['name']}: {m['parameters'] / 1e6:,.0f} M parameters, {m['gradient_bytes'] / 2**20:,.0f} MiB "
            f"on the wire, compute step {m['compute_step_s'][0] * 1e3:.0f}-{m['compute_step_s'][1] * 1e3:.0f} ms "
            f"({m['why']})",
            highlight=False,
        )
    console.print(f"  non-network term: {data['non_network']}", highlight=False)
    table = Table(title="predicted scaling efficiency, mid [range]")
    table.add_column("model", justify="left")
    nets = list(data["networks"])
    table.add_column("nodes", justify="right")
    for net in nets:
        table.add_column(net, justify="right")
    for model in dict.fromkeys(r["model"] for r in data["rows"]):
        for n in sorted({r["nodes"] for r in data["rows"]}):
            at = {r["network"]: r for r in data["rows"] if r["model"] == model and r["nodes"] == n}
            table.add_row(
                model,
                str(n),
                *(
                    f"{at[x]['efficiency']:.2f} [{at[x]['efficiency_range'][0]:.2f}-{at[x]['efficiency_range'][1]:.2f}]"
                    for x in nets
                ),
            )
    console.print(table)
    for line in data["answer"]:
        console.print(line, highlight=False)
    if output is not None:
        print(f"{output / 'study.json'} (every input), {output / 'study.png'}")


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
