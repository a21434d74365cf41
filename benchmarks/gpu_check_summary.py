"""The GPU check's summary (benchmarks/gpu_check.py): each step's entry read from what it left
(a result.json, rank records, nccl-tests' output, its log), and summary.json / summary.md."""

from __future__ import annotations

import json
import re
from typing import Any
from pathlib import Path

from benchmarks.gpu_check_host import absent_parts
from benchmarks.gpu_check_plan import BATCH_RUN

# launch.results.result (pydantic) is imported where a result.json is read: only runs started
# through the launch CLI write one, and a bare host's runs leave rank records instead


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def from_result(result: dict, entry: dict) -> dict:
    """The summary fields of one result.json (launch.results.assemble format), read through its
    typed model (launch.results.result.typed)."""
    from launch.results.result import as_result, typed

    run, fields = as_result(result), typed(result)
    throughput = getattr(fields, "throughput", None)
    config = run.spec
    compute = getattr(fields, "compute_img_per_s", None)
    batch, ranks = config.batch_size, run.world_size or 1
    transport = getattr(fields, "transport", None) or {}
    entry.update(
        status=run.status,
        reason=getattr(fields, "reason", None),
        img_per_s=getattr(throughput, "total_img_per_s", None),
        ci95_img_per_s=getattr(throughput, "ci95_img_per_s", None),
        n_samples=getattr(throughput, "n_samples", None),
        compute_img_per_s=compute,
        # launch.predict.model.predict_training: compute_step_s = batch x ranks / compute_img_per_s
        compute_step_s=(batch * ranks / compute) if compute and batch else None,
        step_time_s=getattr(fields, "step_time_s", None),
        device=getattr(fields, "device", None),
        engine_info=getattr(fields, "engine_info", None),
        versions=getattr(fields, "versions", None),
        batch_size=batch,
        image_size=config.image_size or default_image_size(result),
        wall_seconds=getattr(fields, "wall_seconds", None),
        transport_verdict=transport.get("verdict"),
        nccl=(transport.get("observed") or {}).get("nccl"),
    )
    return entry


def as_nccl_tests(figures: dict | None) -> dict | None:
    """One size's figures of bench.allreduce (Gbit/s) as nccl-tests prints them (GB/s, 1e9 bytes)."""
    if not figures:
        return None
    return {
        "time_us": figures.get("time_us"),
        "algbw_gbyte_s": (figures.get("algbw_gbit_s") or 0) / 8,
        "busbw_gbyte_s": (figures.get("busbw_gbit_s") or 0) / 8,
        "ops_per_sample": figures.get("ops_per_sample"),
    }


def allreduce_rows(sizes: list[dict]) -> list[dict[str, Any]]:
    """Each size's time, algbw and busbw, in place and, where measured, out of place."""
    return [
        {
            "bytes": row.get("bytes"),
            "in_place": as_nccl_tests(row),
            "out_of_place": as_nccl_tests(row.get("out_of_place")),
        }
        for row in sizes
    ]


def values_correct(sizes: list[dict]) -> bool | None:
    """Whether every size's reduced values were what the ranks' inputs sum to (bench.collective
    checks each after its timing: max_abs_error 0); None where no size was recorded."""
    errors = [row.get("max_abs_error") for row in sizes]
    return all(error == 0 for error in errors) if errors else None


def from_allreduce_result(result: dict, entry: dict) -> dict:
    """The summary fields of the harness's allreduce (bench.allreduce) started by `fabric-bench run`:
    each size's time, algbw and busbw as nccl-tests prints them, in place and out of place."""
    from launch.results.result import as_result, typed

    run, fields = as_result(result), typed(result)
    rows = allreduce_rows(run.sizes)
    transport = getattr(fields, "transport", None) or {}
    backend_info = getattr(fields, "backend_info", None) or {}
    entry.update(
        status=run.status,
        reason=getattr(fields, "reason", None),
        device=getattr(fields, "device", None),
        backend_info=getattr(fields, "backend_info", None),
        versions=getattr(fields, "versions", None),
        allreduce=rows,
        values_correct=values_correct(run.sizes),
        allreduce_ranks=run.world_size,
        peak_busbw_gbyte_s=max((r["in_place"]["busbw_gbyte_s"] for r in rows), default=None),
        timing=backend_info.get("timing"),
        wall_seconds=getattr(fields, "wall_seconds", None),
        transport_verdict=transport.get("verdict"),
        nccl=(transport.get("observed") or {}).get("nccl"),
    )
    return entry


def from_allreduce_records(records: list[dict], entry: dict, exit_code: int) -> dict:
    """The summary fields of the harness's allreduce started under torchrun: rank 0's record."""
    record = next((r for r in records if r.get("kind") == "allreduce" and r.get("rank", 0) == 0), None)
    errors = [r["error"] for r in records if r.get("kind") == "error"]
    if record is None:
        entry.update(status="failed", reason="; ".join(errors) or f"no allreduce record (exit code {exit_code})")
        return entry
    rows = allreduce_rows(record.get("sizes") or [])
    correct = values_correct(record.get("sizes") or [])
    ok = exit_code == 0 and record.get("status") == "ok" and correct is True
    sums = "" if correct else ", wrong sums" if correct is False else ", no sizes recorded"
    backend_info = record.get("backend_info") or {}
    entry.update(
        status="ok" if ok else "failed",
        reason=None if ok else f"exit code {exit_code}{sums}",
        device={"nccl": "cuda", "gloo": "cpu"}.get(str(backend_info.get("process_group"))),
        backend_info=record.get("backend_info"),
        versions=record.get("versions"),
        allreduce=rows,
        values_correct=correct,
        allreduce_ranks=record.get("world_size"),
        peak_busbw_gbyte_s=max((r["in_place"]["busbw_gbyte_s"] for r in rows), default=None),
        timing=backend_info.get("timing"),
        wall_seconds=record.get("seconds"),
        format="rank records",
    )
    return entry


def from_nccl_tests(text: str, entry: dict, exit_code: int) -> dict:
    """The summary fields of nccl-tests' all_reduce_perf (launch.results.nccl_tests)."""
    from launch.results import nccl_tests

    parsed = nccl_tests.parse(text)
    ok = exit_code == 0 and bool(parsed["rows"])
    entry.update(
        status="ok" if ok else "failed",
        reason=None if ok else f"exit code {exit_code}" + ("" if parsed["rows"] else ", no result rows"),
        allreduce=[{k: r[k] for k in ("bytes", "in_place", "out_of_place")} for r in parsed["rows"]],
        allreduce_ranks=parsed["ranks"],
        peak_busbw_gbyte_s=max((r["in_place"]["busbw_gbyte_s"] or 0 for r in parsed["rows"]), default=None),
        nccl_tests={k: parsed[k] for k in ("version", "ranks", "warmup", "iters", "avg_busbw_gbyte_s")},
    )
    return entry


def default_image_size(result: dict) -> int | None:
    from bench import catalog  # plain data
    from launch.results.result import typed

    fields = typed(result)
    framework, model = getattr(fields, "framework", None), getattr(fields, "model", None)
    if framework is None or model is None:
        return None
    return catalog.MODELS.get(framework, {}).get(model)


def from_records(records: list[dict], entry: dict, exit_code: int) -> dict:
    """The summary fields of a direct run (no launch CLI): rank 0's train record."""
    record = next((r for r in records if r.get("kind") == "train"), None)
    errors = [r["error"] for r in records if r.get("kind") == "error"]
    if record is None:
        entry.update(status="failed", reason="; ".join(errors) or f"no train record (exit code {exit_code})")
        return entry
    compute = mean(record["compute_samples_img_per_s"])
    batch = record["config"]["batch_size"]
    entry.update(
        status=record["status"] if exit_code == 0 else "failed",
        reason=None if exit_code == 0 else f"exit code {exit_code}",
        img_per_s=mean(record["samples_img_per_s"]),
        n_samples=len(record["samples_img_per_s"]),
        compute_img_per_s=compute,
        compute_step_s=batch / compute if compute else None,
        device=record.get("device"),
        engine_info=record.get("engine_info"),
        versions=record.get("versions"),
        batch_size=batch,
        image_size=record["config"].get("image_size"),
        format="rank records",
    )
    return entry


def why_lines(text: str, nccl_warnings: bool = False) -> list[str]:
    """The last three lines of a step's output that say why it failed: exceptions raised, the
    bench programs' own `error:` lines (bench.train_args.fail), and NCCL's WARN lines if asked."""
    lines = text.splitlines()
    own = [line for line in lines if re.match(r"(\[[^\]]*\]\s*)?error: ", line)]
    raised = [
        line for line in lines if re.search(r"\w(Error|Exception): ", line) and "torch.distributed.elastic" not in line
    ]
    warned = [line for line in lines if nccl_warnings and "NCCL WARN" in line]
    return [line.strip()[:300] for line in (raised + own + warned)[-3:]]


def keep_nccl_lines(log_path: Path, target: Path, entry: dict) -> None:
    if not log_path.exists():
        return
    lines = [l for l in log_path.read_text(errors="replace").splitlines() if "NCCL" in l]
    if lines:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        entry["nccl_log"] = str(target.relative_to(target.parents[1]))


def unlike_allreduces(side: list[dict]) -> list[str]:
    """A line where the allreduces beside each other ran different numbers of ranks: nccl-tests
    with -g 1 on a one-GPU host is one rank, whose busbw is 0 by its factor 2(n-1)/n, while the
    harness's two ranks share the GPU over NCCL's network transport; their figures are not alike."""
    ranks = {e["label"]: e["allreduce_ranks"] for e in side if e.get("allreduce_ranks")}
    if len(set(ranks.values())) < 2:
        return []
    said = ", ".join(f"{label} {n}" for label, n in ranks.items())
    return [
        "",
        f"Not like for like: the allreduces ran different numbers of ranks ({said}). One rank moves "
        "nothing between ranks (busbw 0 by nccl-tests' factor 2(n-1)/n; its algbw is a copy on the "
        "GPU): read each row on its own, not as a ratio of the other.",
    ]


def fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def write_summary(
    out: Path,
    mode: str,
    info: dict,
    captured: dict,
    entries: list[dict],
    seconds: float,
    probes: dict | None = None,
    limits: dict | None = None,
) -> dict:
    """summary.json and summary.md; `limits`: each step's time limit (gpu_check_plan.STEP_LIMITS_S)."""
    absent = absent_parts(info) if info.get("tools") is not None else []
    compute_steps = {
        f"{e['model']} {e['precision']} ({e['framework']})": e["compute_step_s"]
        for e in entries
        if e.get("compute_step_s") and e["engine"] != "horovod" and e["label"] != BATCH_RUN and e.get("ranks", 1) == 1
    }  # the predictor's step: one rank alone on its GPU
    failed = [e["label"] for e in entries if e.get("status") not in ("ok", "absent", "skipped")]
    failed += [f"probe-{name}" for name, p in (probes or {}).items() if p.get("status") == "failed"]
    summary = {
        "schema_version": 1,
        "mode": mode,
        "seconds": seconds,
        "host": info.get("host"),
        "python": info.get("python"),
        "environment": "environment.json",
        "captures": captured["captures"],
        **captured["parsed"],
        "gpu_states": captured.get("gpu_states"),
        "probes": probes or {},
        "runs": entries,
        "compute_step_s": compute_steps,
        "absent": absent,
        "step_limits_s": limits,
        "counts": {
            s: sum(1 for e in entries if e.get("status") == s)
            for s in ("ok", "failed", "transport_mismatch", "absent", "skipped")
        },
        "failed": failed,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    lines = [
        f"# GPU check ({mode} mode) on {info.get('host')}",
        "",
        f"Python {info.get('python')} ({info.get('python_version')}), torch {info.get('torch')}, "
        f"CUDA available: {info.get('cuda_available')}, GPUs: {', '.join(info.get('gpus') or []) or 'none'}, "
        f"NCCL {info.get('nccl') or '-'}, torchvision {info.get('torchvision')}, "
        f"TensorFlow {info.get('tensorflow')}, Horovod {info.get('horovod')}; {seconds:.0f} s in all"
        + (f" (the steps' limits add up to {sum(limits.values()):.0f} s)." if limits else "."),
        "",
        *([f"- {a['part']}: absent ({a['reason']})" for a in absent] + [""] if absent else []),
        "| run | status | img/s | ±95 % | compute-only img/s | compute step (ms) | batch x size | device |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for e in entries:
        lines.append(
            f"| {e['label']} | {e.get('status')} | {fmt(e.get('img_per_s'), '.1f')} | "
            f"{fmt(e.get('ci95_img_per_s'), '.1f')} | {fmt(e.get('compute_img_per_s'), '.1f')} | "
            f"{fmt((e.get('compute_step_s') or 0) * 1e3 or None, '.1f')} | "
            f"{e.get('batch_size') or '-'} x {e.get('image_size') or '-'} | {e.get('device') or '-'} |"
        )
    reasons = [
        f"- {e['label']}: {e['reason']}" + (f" (log: `{e['errors'][-1]}`)" if e.get("errors") else "")
        for e in entries
        if e.get("reason")
    ]
    lines += ["", "Probes:"]
    lines += [
        f"- {name}: {p.get('status')}"
        + (f" ({p['reason']})" if p.get("reason") else "")
        + (f", {p['img_per_s']:.1f} img/s compute-only on {p.get('device')}" if p.get("img_per_s") else "")
        + (f", {p.get('backend')} on {p.get('device')} in {p['seconds']} s" if p.get("seconds") is not None else "")
        for name, p in (probes or {}).items()
    ]
    lines += ["", "Not run, or not ok:" if reasons else "All runs ok.", *reasons, "", "Captures:"]
    lines += [
        f"- {name}: {c['status']}" + (f" ({c['reason']})" if c.get("reason") else "")
        for name, c in captured["captures"].items()
    ]
    side = [e for e in entries if e.get("allreduce")]
    if side:  # the harness's allreduce beside nccl-tests' (same conventions; GB/s as nccl-tests prints)
        lines += [
            "",
            "Allreduce, the harness beside nccl-tests (largest sizes; GB/s):",
            "",
            "| run | ranks | bytes | in place us | algbw | busbw | out of place us | algbw | busbw |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for e in side:
            for row in e["allreduce"][-4:]:
                ip, oop = row.get("in_place") or {}, row.get("out_of_place") or {}
                lines.append(
                    f"| {e['label']} | {e.get('allreduce_ranks') or '-'} | {row['bytes']} | "
                    f"{fmt(ip.get('time_us'), '.1f')} | "
                    f"{fmt(ip.get('algbw_gbyte_s'), '.2f')} | {fmt(ip.get('busbw_gbyte_s'), '.2f')} | "
                    f"{fmt(oop.get('time_us'), '.1f')} | {fmt(oop.get('algbw_gbyte_s'), '.2f')} | "
                    f"{fmt(oop.get('busbw_gbyte_s'), '.2f')} |"
                )
        lines += unlike_allreduces(side)
        lines += [
            "",
            *(
                f"- {e['label']}: started by {e['started_by']}"
                + (", every size's sums checked: correct" if e.get("values_correct") is True else "")
                + (", wrong sums" if e.get("values_correct") is False else "")
                for e in side
                if e.get("started_by")
            ),
        ]
    batches = [e for e in entries if e["label"] in ("torch-ddp-resnet50-fp32", BATCH_RUN) and e.get("img_per_s")]
    if len(batches) == 2:
        lines += [
            "",
            "Batch per GPU, ResNet-50 fp32 on one GPU: "
            + ", ".join(f"batch {e.get('batch_size')}: {e['img_per_s']:.1f} img/s" for e in batches),
        ]
    nccl = [(e["label"], e["nccl"]) for e in entries if e.get("nccl")]
    if nccl:
        lines += ["", "NCCL seen (launch.results.transport):"]
        lines += [
            f"- {label}: network {', '.join(n['network']) or '-'}, version {n['version']}, "
            f"channels {', '.join(n['channels']) or 'none (1 rank)'}"
            for label, n in nccl
        ]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return summary
