"""The alpha-beta model of ring allreduce, fitted from the micro-benchmark and used
to predict data-parallel training steps.

    T(S, p) = 2(p-1)·alpha + 2·(p-1)/p · S·beta

alpha: per-message latency (s); beta: inverse bandwidth (s/byte); S: bytes per
rank; p: ranks. The fit is least squares on relative error (weights 1/T²), so
small messages determine alpha and large ones beta.

A training step is predicted as compute (the same step without gradient
exchange, measured by the training benchmark: `compute_img_per_s`) plus one
allreduce of all gradients (`gradient_bytes`), i.e. with NO overlap of
communication and backward pass: an upper bound for DDP/Horovod, which overlap.

    python -m launch.predict.model ALLREDUCE_RESULT TRAIN_RESULT [BASELINE_1_RANK_RESULT]
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

from launch.errors import UsageError
from launch.results.result import field_of, fields_of
from launch.results.result import read as read_result
from launch.schema import at, number


@dataclass(frozen=True)
class AlphaBeta:
    alpha_s: float
    beta_s_per_byte: float
    ranks: int  # the rank count the fit was measured at

    @property
    def bandwidth_gbit_s(self) -> float:
        return 8 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else float("inf")

    def allreduce_s(self, nbytes: float, ranks: int | None = None) -> float:
        p = ranks or self.ranks
        if p < 2:
            return 0.0
        return 2 * (p - 1) * self.alpha_s + 2 * (p - 1) / p * nbytes * self.beta_s_per_byte

    def as_dict(self) -> dict:
        return {**asdict(self), "bandwidth_gbit_s": self.bandwidth_gbit_s}


def _weighted_fit(xs: list[tuple[float, float]], ts: list[float]) -> tuple[float, float]:
    """min sum ((a·x0 + b·x1 - t) / t)² for (a, b): the 2x2 normal equations."""
    s00 = s01 = s11 = r0 = r1 = 0.0
    for (x0, x1), t in zip(xs, ts):
        w = 1.0 / (t * t)
        s00, s01, s11 = s00 + w * x0 * x0, s01 + w * x0 * x1, s11 + w * x1 * x1
        r0, r1 = r0 + w * x0 * t, r1 + w * x1 * t
    det = s00 * s11 - s01 * s01
    if det <= 0:
        raise ValueError("need at least two distinct message sizes to fit alpha and beta")
    return (r0 * s11 - r1 * s01) / det, (s00 * r1 - s01 * r0) / det


def fit(rows: list[dict], ranks: int, min_bytes: int = 0) -> AlphaBeta:
    """alpha and beta from allreduce rows (`bytes`, `time_us`) measured on `ranks` ranks.

    min_bytes leaves out smaller messages: on tbf-shaped links a message within
    the bucket's burst passes faster than the rate, which no alpha-beta line fits.
    """
    if ranks < 2:
        raise ValueError("the allreduce model needs rows measured on >= 2 ranks")
    rows = [row for row in rows if row["bytes"] >= min_bytes]
    xs = [(2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks * row["bytes"]) for row in rows]
    ts = [row["time_us"] * 1e-6 for row in rows]
    alpha, beta = _weighted_fit(xs, ts)
    if alpha < 0:  # latency below resolution: bandwidth alone
        alpha = 0.0
        beta = sum(x1 / t for (_, x1), t in zip(xs, ts)) / sum((x1 / t) ** 2 for (_, x1), t in zip(xs, ts))
    return AlphaBeta(alpha, beta, ranks)


def predict_training(model: AlphaBeta, train: dict, baseline: dict | None = None) -> dict:
    """Predicted vs measured step time and scaling efficiency of a training result (UsageError, one
    line, where it lacks a figure the prediction needs)."""
    fields = fields_of(train)
    needed = ("compute_img_per_s", "gradient_bytes", "throughput.per_rank_img_per_s", "spec.batch_size")
    found = {name: number(at(fields, name)) for name in needed}
    missing = [name for name, value in found.items() if not value or value <= 0]
    single = number(at(fields_of(baseline), "throughput.total_img_per_s")) if baseline is not None else None
    if baseline is not None and not (single and single > 0):
        missing.append("the baseline's throughput.total_img_per_s")
    if missing:
        raise UsageError(f"{fields.run_id}: the train result has no {', '.join(missing)}")
    compute, gradient_bytes, per_rank, batch = (float(found[name] or 0) for name in needed)
    ranks = fields.world_size or 1
    compute_step_s = batch * ranks / compute  # per-rank compute-only step
    allreduce_s = model.allreduce_s(gradient_bytes, ranks)
    predicted_step_s = compute_step_s + allreduce_s
    measured_step_s = batch / per_rank
    # 1-rank throughput: the baseline run if given, else this run's compute-only step
    single_img_per_s = single or batch / compute_step_s
    return {
        "ranks": ranks,
        "gradient_bytes": at(fields, "gradient_bytes"),
        "compute_step_s": compute_step_s,
        "predicted_allreduce_s": allreduce_s,
        "predicted_step_s": predicted_step_s,
        "measured_step_s": measured_step_s,
        "predicted_over_measured": predicted_step_s / measured_step_s,
        "predicted_scaling_efficiency": batch / predicted_step_s / single_img_per_s,
        "measured_scaling_efficiency": batch / measured_step_s / single_img_per_s,
        "efficiency_baseline": "1-rank run" if baseline else "compute-only step of the same run",
        "model": model.as_dict(),
    }


def describe(prediction: dict) -> str:
    p = prediction
    return (
        f"{p['ranks']} ranks, {p['gradient_bytes'] / 2**20:.1f} MiB gradients: "
        f"step predicted {p['predicted_step_s'] * 1e3:.1f} ms (compute {p['compute_step_s'] * 1e3:.1f} + "
        f"allreduce {p['predicted_allreduce_s'] * 1e3:.1f}) vs measured {p['measured_step_s'] * 1e3:.1f} ms "
        f"({p['predicted_over_measured']:.2f}x); scaling efficiency predicted "
        f"{p['predicted_scaling_efficiency']:.2f} vs measured {p['measured_scaling_efficiency']:.2f} "
        f"(against the {p['efficiency_baseline']})"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        allreduce, train, *rest = [read_result(a) for a in args]
        model = fit(allreduce.sizes, allreduce.world_size or 0)
        print(
            f"alpha {model.alpha_s * 1e6:.1f} us, beta -> {model.bandwidth_gbit_s:.3f} Gbit/s "
            f"({field_of(allreduce, 'backend')}, {model.ranks} ranks)"
        )
        print(describe(predict_training(model, train, rest[0] if rest else None)))
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
