"""Results of the communication benchmarks (allreduce micro-benchmark, halo proxy):
rank records in, result fields out (registered in launch.results.assemble.ASSEMBLERS), and
their tables."""
from __future__ import annotations

from rich.table import Table


def _by_rank(records: list[dict], kind: str, world_size: int) -> tuple[dict[int, dict], list[str]]:
    by_rank = {r["rank"]: r for r in records if r["kind"] == kind}
    missing = sorted(set(range(world_size)) - set(by_rank))
    return by_rank, [f"ranks {missing} wrote no {kind} record"] if missing else []


def allreduce_metrics(records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
    """Rank 0's rows (times are already the slowest rank's); correct only if every rank's values were."""
    by_rank, problems = _by_rank(records, "allreduce", world_size)
    if not by_rank:
        return {}, problems
    wrong = sorted(rank for rank, r in by_rank.items() if not r["correct"])
    if wrong:
        problems.append(f"allreduce gave wrong values on ranks {wrong}")
    first = by_rank[min(by_rank)]
    metrics = {
        "backend": first["backend"],
        "sizes": first["sizes"],
        "p2p": first["p2p"],
        "peak_busbw_gbit_s": max((row["busbw_gbit_s"] for row in first["sizes"]), default=None),
        "correct": not wrong,
        "backend_info": first.get("backend_info", {}),
        "sweep": first.get("sweep"),  # the top size asked and used (cut to the GPU's memory); None before it
        "versions": first.get("versions", {}),
        "hosts": sorted({r["host"] for r in by_rank.values()}),
    }
    return metrics, problems


def halo_metrics(records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
    by_rank, problems = _by_rank(records, "halo", world_size)
    if not by_rank:
        return {}, problems
    first = by_rank[min(by_rank)]
    if not first["correct"]:
        problems.append(f"halo checksum {first['checksum']:#x} differs from the 1-rank run's "
                        f"{first['reference_checksum']:#x}")
    metrics = {key: first[key] for key in ("grid", "dims", "steps", "time_per_iter_s", "time_per_iter_mean_s",
                                           "ci95_s", "comm_fraction", "checksum", "reference_checksum",
                                           "value_sum", "correct", "versions")}
    metrics["samples_s"] = first["samples_s"]
    metrics["checksum_hex"] = f"{first['checksum']:#018x}"
    metrics["hosts"] = sorted({r["host"] for r in by_rank.values()})
    return metrics, problems


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def comm_table(result: dict) -> Table:
    """Allreduce: one row per size; halo: one summary row."""
    rate = result.get("link_rate_gbit_s")
    if result["benchmark"] == "halo":
        table = Table(title=f"Halo exchange ({result.get('grid')}^3, {result['world_size']} ranks)")
        for column in ("ms/iter", "comm share", "checksum", "status"):
            table.add_column(column)
        table.add_row(_fmt(result.get("time_per_iter_s") and result["time_per_iter_s"] * 1e3, ".3f"),
                      _fmt(result.get("comm_fraction"), ".0%"), result.get("checksum_hex", "-"),
                      result["status"] if result["status"] == "ok" else f"{result['status']}: {result.get('reason')}")
        return table
    title = f"Allreduce ({result.get('backend')}, {result['world_size']} ranks"
    title += f", link {rate:g} Gbit/s)" if rate else ")"
    table = Table(title=title)
    for column in ("bytes", "time us", "algbw Gbit/s", "busbw Gbit/s") + (("busbw/link",) if rate else ()) + ("error",):
        table.add_column(column, justify="right")
    for row in result.get("sizes", []):
        cells = [str(row["bytes"]), f"{row['time_us']:.1f}", f"{row['algbw_gbit_s']:.3f}", f"{row['busbw_gbit_s']:.3f}"]
        if rate:
            cells.append(f"{row['busbw_gbit_s'] / rate:.2f}")
        table.add_row(*cells, f"{row['max_abs_error']:g}")
    for row in result.get("p2p", []):
        table.caption = (table.caption or "") + (f"p2p {row['bytes']} B: {row['time_us']:.1f} us one way, "
                                                 f"{row['bandwidth_gbit_s']:.3f} Gbit/s.  ")
    if result["status"] != "ok":
        table.caption = (table.caption or "") + f"{result['status']}: {result.get('reason')}"
    return table
