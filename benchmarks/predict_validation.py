"""The scaling predictor (launch.predict.predict) against measured runs on emulated fabrics.

Root required (network namespaces + tc tbf, launch.fleet.emulate). For every link rate:
- 2-node allreduce micro-benchmarks (backend `torch` = gloo for DDP, `horovod`
  for Horovod), each fitted to an alpha-beta model on rows >= 8 MiB;
- 2-node training of every model with every engine. The prediction uses the
  run's compute-only step, measured by the benchmark with the same ranks
  sharing this machine's cores as while training (on a 2-core host that
  contention is part of the compute step: shown, not fitted away), its
  gradient bytes and its engine's bucket settings, plus the fitted fabric;
  and the host's own cost of the exchange (copies, reductions, TCP over the
  veths, all on the cores that compute): measured per model and engine as
  the step of the same training on an UNSHAPED link minus its compute step,
  met by the engine's rule (launch.predict.predict.HOST_RULE), and printed
  beside every point with the predictions of the other rules and without it;
and, at the first rate, 3- and 4-node allreduces predicted from the 2-node fit
(the ring formula's rank scaling). Nothing measured is fitted to the training
runs: each prediction is made before it is compared.

`--repeats N` runs every training point (and the unshaped runs) N times, in
rounds whose order reverses each round, so a drift of the shared machine hits
every point alike; a point then compares its median prediction with its median
measured step, h is the median of the unshaped runs, and the CI printed is the
one between the runs (the spread a single run cannot show).

Prints predicted vs measured step (or allreduce) time and the error of every
point; goal: |error| <= 10 % at every point, median <= 5 %. Writes
RESULTS/validation.json with every point and input.

    python benchmarks/predict_validation.py [--rates 0.5gbit,1gbit,2.5gbit,5gbit]
        [--models resnet18,mobilenet_v3_small] [--engines ddp,horovod] [--multi-nodes 3,4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench.stats import summarize
from launch.predict import predict
from launch.results.result import Result, as_result, field_of, typed
from launch.errors import UsageError
from launch.runs.run import execute_run, prepare
from launch.ranks.runspec import RunSpec

FIT_MIN_BYTES = 8 * 2**20  # beyond tbf's burst (rate x 3 ms) at these rates
BACKEND_OF = {"ddp": "torch", "horovod": "horovod"}  # the allreduce the engine's gradients go through on CPUs
GOAL_MAX, GOAL_MEDIAN = 0.10, 0.05


# run id -> this machine's 1-minute load average as the run ended (other work shares its cores)
HOST_LOAD: dict[str, float] = {}


def run(spec: RunSpec, results: Path) -> Result | None:
    started = time.monotonic()
    result = as_result(execute_run(spec, prepare(spec, results), timeout=900, echo=False))
    took = time.monotonic() - started
    HOST_LOAD[result.run_id] = os.getloadavg()[0]
    if result.status != "ok":
        print(f"  failed ({took:.0f} s): {field_of(result, 'reason')}", flush=True)
        return None
    print(f"  ok ({took:.0f} s, host load {HOST_LOAD[result.run_id]:.1f})", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="0.5gbit,1gbit,2.5gbit,5gbit")
    p.add_argument("--models", default="resnet18,mobilenet_v3_small")
    p.add_argument("--engines", default="ddp,horovod")
    p.add_argument("--multi-nodes", default="3,4", help="node counts of the allreduce check ('' for none)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of every training point, in rounds whose order reverses each round; "
        "a point compares the medians of its runs",
    )
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--batches-per-iter", type=int, default=2)
    p.add_argument("--allreduce-iters", type=int, default=5)
    p.add_argument("--max-bytes", type=int, default=64 * 2**20)
    p.add_argument(
        "--max-seconds-per-size", type=float, default=None, help="each allreduce size's budget (default: the bench's)"
    )
    p.add_argument("--results", type=Path, default=Path("results/predict_validation"))
    args = p.parse_args()
    rates = [r for r in args.rates.split(",") if r]
    models = [m for m in args.models.split(",") if m]
    engines = [e for e in args.engines.split(",") if e]
    multi = [int(n) for n in args.multi_nodes.split(",") if n]
    if set(engines) - set(BACKEND_OF):
        print(f"error: engines must be among {', '.join(BACKEND_OF)}", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("error: --repeats must be at least 1", file=sys.stderr)
        return 2
    comm = RunSpec(
        launcher="emulated",
        nodes=2,
        ranks=2,
        benchmark="allreduce",
        min_bytes=2**16,
        max_bytes=args.max_bytes,
        iters=args.allreduce_iters,
        warmup=1,
        max_seconds_per_size=args.max_seconds_per_size,
    )
    train = RunSpec(
        launcher="emulated",
        nodes=2,
        ranks=2,
        image_size=args.image_size,
        batch_size=args.batch_size,
        iters=args.iters,
        batches_per_iter=args.batches_per_iter,
        warmup=2,
    )
    points, started, fabrics = [], time.monotonic(), {}
    try:
        for rate in rates:  # the fabrics: one allreduce fit per rate and backend
            for engine in engines:
                backend = BACKEND_OF[engine]
                print(f"{rate}: 2-node allreduce ({backend}) ...", flush=True)
                result = run(dataclasses.replace(comm, link_rate=rate, backend=backend), args.results)
                if result:
                    fabrics[rate, engine] = predict.fabric_from_allreduce(result, f"{rate} {backend}", FIT_MIN_BYTES)
                    if rate == rates[0] and engine == engines[0]:
                        points += multi_node_points(
                            result, fabrics[rate, engine], comm, rate, backend, multi, args.results
                        )
        # training: rate None is the unshaped link, which measures the host's cost of the exchange
        configs = [
            (rate, model, engine)
            for rate in (None, *rates)
            for model in models
            for engine in engines
            if rate is None or (rate, engine) in fabrics
        ]
        runs: dict[tuple, list[dict]] = {config: [] for config in configs}
        for round_ in range(args.repeats):
            for rate, model, engine in configs if round_ % 2 == 0 else configs[::-1]:
                print(
                    f"round {round_ + 1}/{args.repeats} {rate or 'unshaped'}: 2-node {engine} {model} ...", flush=True
                )
                trained = run(dataclasses.replace(train, link_rate=rate, engine=engine, model=model), args.results)
                if trained:
                    runs[rate, model, engine].append(trained)
        host = {
            (engine, model): host_cost(results)
            for (rate, model, engine), results in runs.items()
            if rate is None and results
        }
        points += [
            training_point(results, fabrics[rate, engine], rate, host.get((engine, model)))
            for (rate, model, engine), results in runs.items()
            if rate is not None and results
        ]
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(points, time.monotonic() - started, args)
    return 0 if points else 1


def host_cost(unshaped: list[dict]) -> tuple[float, int, list[str]]:
    """h (the median over the unshaped runs), its rank count, and the runs it came from."""
    costs = [predict.host_overhead_from(result) for result in unshaped]
    return statistics.median(c[0] for c in costs), costs[0][1], [as_result(r).run_id for r in unshaped]


def training_point(results: list[dict], fabric: predict.Fabric, rate: str, host: tuple | None) -> dict:
    """One (rate, engine, model) point: each run predicted from its own compute step; the point
    compares the median prediction with the median measured step."""
    runs = [run_point(result, fabric, rate, host) for result in results]
    if len(runs) == 1:
        return {**runs[0], "repeats": 1}
    med = {
        key: statistics.median(r[key] for r in runs)
        for key in (
            "predicted_s",
            "measured_s",
            "no_overlap_s",
            "compute_s",
            "allreduce_s",
            "host_overhead_s",
            "predicted_without_host_s",
            "predicted_host_hidden_s",
            "predicted_host_series_s",
            "predicted_host_spread_s",
        )
    }
    spread = summarize([r["measured_s"] for r in runs])
    return {
        **runs[0],
        **med,
        "repeats": len(runs),
        "error": med["predicted_s"] / med["measured_s"] - 1,
        "error_without_host": med["predicted_without_host_s"] / med["measured_s"] - 1,
        "error_host_hidden": med["predicted_host_hidden_s"] / med["measured_s"] - 1,
        "error_host_series": med["predicted_host_series_s"] / med["measured_s"] - 1,
        "error_host_spread": med["predicted_host_spread_s"] / med["measured_s"] - 1,
        # between the runs now, not over one run's iterations
        "measured_ci95_rel": spread.ci95 / spread.mean,
        "measured_range_s": [min(r["measured_s"] for r in runs), max(r["measured_s"] for r in runs)],
        "host_load_1min": max(r["host_load_1min"] for r in runs),
        "run_id": [r["run_id"] for r in runs],
        "runs": runs,
    }


def run_point(result: dict, fabric: predict.Fabric, rate: str, host: tuple | None) -> dict:
    network_only = predict.workload_from(result)
    workload = network_only
    if host is not None:
        workload = dataclasses.replace(network_only, host_overhead_s=host[0], host_overhead_ranks=host[1])
    run, fields = as_result(result), typed(result)
    ranks = run.world_size or 1
    predicted = predict.predict_point(workload, fabric, ranks)
    without_host = predict.predict_point(network_only, fabric, ranks)
    throughput = getattr(fields, "throughput", None)
    assert throughput is not None and fields is not None, run.run_id  # an ok train result has them
    measured = getattr(fields.spec, "batch_size", 0) / throughput.per_rank_img_per_s
    # the measurement's own 95 % CI over its iterations, relative (a step is 1 / throughput)
    noise = (
        throughput.ci95_img_per_s / throughput.total_img_per_s
        if throughput.ci95_img_per_s not in (None, float("inf")) and throughput.total_img_per_s
        else None
    )
    return {
        "kind": "train",
        "rate": rate,
        "what": f"{fields.engine} {fields.model}",
        "ranks": ranks,
        "predicted_s": predicted["step_s"],
        "measured_s": measured,
        "no_overlap_s": predicted["step_no_overlap_s"],
        "compute_s": workload.compute_step_s,
        "allreduce_s": predicted["allreduce_s"],
        "gradient_bytes": workload.gradient_bytes,
        "host_overhead_s": predicted["host_overhead_s"],
        "host_overhead_run": host[2] if host else None,
        "predicted_without_host_s": without_host["step_s"],
        "error_without_host": without_host["step_s"] / measured - 1,
        # the rules the predictor does not use for this engine, scored beside it (predict.HOST_RULE);
        # h hidden under the wire (max instead of sum) it uses for neither
        "predicted_host_hidden_s": (
            hidden := max(without_host["step_s"], workload.compute_step_s + predicted["host_overhead_s"])
        ),
        "error_host_hidden": hidden / measured - 1,
        "host_rule": predicted["host_rule"],
        "predicted_host_series_s": predicted["step_host_series_s"],
        "error_host_series": predicted["step_host_series_s"] / measured - 1,
        "predicted_host_spread_s": predicted["step_host_spread_s"],
        "error_host_spread": predicted["step_host_spread_s"] / measured - 1,
        "wire_during_backward": predicted["wire_during_backward"],
        "error": predicted["step_s"] / measured - 1,
        "run_id": run.run_id,
        "fabric": dataclasses.asdict(fabric),
        "measured_ci95_rel": noise,
        "host_load_1min": HOST_LOAD.get(run.run_id),
        "workload": workload.as_dict(),
    }


def multi_node_points(
    two: dict, fabric: predict.Fabric, comm: RunSpec, rate: str, backend: str, node_counts: list[int], results: Path
) -> list[dict]:
    """Allreduce at 3, 4 nodes predicted from the 2-node fit, at every size >= FIT_MIN_BYTES."""
    out = []
    for nodes in node_counts:
        print(f"{rate}: {nodes}-node allreduce ({backend}) ...", flush=True)
        measured = run(dataclasses.replace(comm, nodes=nodes, ranks=nodes, link_rate=rate, backend=backend), results)
        if not measured:
            continue
        for row in as_result(measured).sizes:
            if row["bytes"] >= FIT_MIN_BYTES:
                predicted = fabric.allreduce_s(row["bytes"], nodes)
                out.append(
                    {
                        "kind": "allreduce",
                        "rate": rate,
                        "what": f"{backend} {row['bytes'] >> 20} MiB",
                        "ranks": nodes,
                        "predicted_s": predicted,
                        "measured_s": row["time_us"] * 1e-6,
                        "error": predicted / (row["time_us"] * 1e-6) - 1,
                        "run_id": as_result(measured).run_id,
                        "host_load_1min": HOST_LOAD.get(as_result(measured).run_id),
                        "fitted_on": as_result(two).run_id,
                        "fabric": dataclasses.asdict(fabric),
                    }
                )
    return out


def report(points: list[dict], seconds: float, args: argparse.Namespace) -> None:
    print(
        f"\npredicted vs measured ({seconds / 60:.1f} min of runs); training: overlapped bucketed allreduce, "
        "compute step measured with 2 ranks sharing this host's cores"
    )
    header = f"{'kind':9} {'rate':>8} {'what':28} {'ranks':>5} {'pred ms':>9} {'meas ms':>9} {'error':>7}   notes"
    print(header)
    print("-" * len(header))
    for pt in points:
        notes = f"load {pt['host_load_1min']:.1f}"
        if pt["kind"] == "train":
            if pt.get("repeats", 1) > 1:
                low, high = pt["measured_range_s"]
                notes += (
                    f"; median of {pt['repeats']} runs ({low * 1e3:.0f}-{high * 1e3:.0f} ms), "
                    f"±{pt['measured_ci95_rel'] * 100:.1f} % between runs"
                )
            elif pt.get("measured_ci95_rel") is not None:
                notes += f"; measured ±{pt['measured_ci95_rel'] * 100:.1f} % over its iterations"
            notes += (
                f"; compute {pt['compute_s'] * 1e3:.0f} ms, host exchange cost {pt['host_overhead_s'] * 1e3:.0f}"
                f" ms ({pt['host_rule']}), allreduce {pt['allreduce_s'] * 1e3:.0f} ms, no-overlap bound "
                f"{pt['no_overlap_s'] * 1e3:.0f} ms; without the host cost "
                f"{pt['predicted_without_host_s'] * 1e3:.0f} ms ({pt['error_without_host'] * 100:+.1f}%), "
                f"in series {pt['predicted_host_series_s'] * 1e3:.0f} ms ({pt['error_host_series'] * 100:+.1f}%), "
                f"hidden under the wire {pt['predicted_host_hidden_s'] * 1e3:.0f} ms "
                f"({pt['error_host_hidden'] * 100:+.1f}%), spread over the wire "
                f"({pt['wire_during_backward'] * 100:.0f} % of it during backward) "
                f"{pt['predicted_host_spread_s'] * 1e3:.0f} ms ({pt['error_host_spread'] * 100:+.1f}%)"
            )
        print(
            f"{pt['kind']:9} {pt['rate']:>8} {pt['what']:28} {pt['ranks']:5d} {pt['predicted_s'] * 1e3:9.1f} "
            f"{pt['measured_s'] * 1e3:9.1f} {pt['error'] * 100:+6.1f}%   {notes}"
        )
    errors = [abs(pt["error"]) for pt in points]
    if errors:
        worst, median = max(errors), statistics.median(errors)
        print(
            f"\n{len(errors)} points: max |error| {worst * 100:.1f} % (goal {GOAL_MAX * 100:.0f} %: "
            f"{'met' if worst <= GOAL_MAX else 'NOT met'}), median {median * 100:.1f} % (goal "
            f"{GOAL_MEDIAN * 100:.0f} %: {'met' if median <= GOAL_MEDIAN else 'NOT met'})"
        )
    noisy = [pt for pt in points if pt.get("measured_ci95_rel") is not None]
    if noisy:
        within = sum(abs(pt["error"]) <= pt["measured_ci95_rel"] for pt in noisy)
        over = "its runs" if args.repeats > 1 else "its iterations; sitting-to-sitting spread is larger"
        print(
            f"training points whose prediction lies within the measurement's own 95 % CI (over {over}): "
            f"{within}/{len(noisy)}"
        )
    trained = [pt for pt in points if pt["kind"] == "train"]
    if trained:
        rules = {
            "the predictor (host cost by engine: "
            + ", ".join(f"{e} {r}" for e, r in predict.HOST_RULE.items())
            + ")": "error",
            "in series": "error_host_series",
            "spread over the wire": "error_host_spread",
            "hidden under the wire": "error_host_hidden",
            "no host cost": "error_without_host",
        }
        print(
            "training points, by rule for the host's cost: "
            + "; ".join(
                f"{name} max {max(abs(pt[key]) for pt in trained) * 100:.1f} %, median "
                f"{statistics.median(abs(pt[key]) for pt in trained) * 100:.1f} %, "
                f"{sum(abs(pt[key]) > GOAL_MAX for pt in trained)}/{len(trained)} beyond {GOAL_MAX * 100:.0f} %, "
                f"mean signed {statistics.mean(pt[key] for pt in trained) * 100:+.1f} %"
                for name, key in rules.items()
            )
        )
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / "validation.json"
    path.write_text(
        json.dumps(
            {"arguments": {k: str(v) for k, v in vars(args).items()}, "seconds": seconds, "points": points}, indent=2
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"every point and input: {path}")


if __name__ == "__main__":
    sys.exit(main())
