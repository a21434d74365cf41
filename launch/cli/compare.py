"""`fabric-bench compare A B`: B against A per metric; the exit code gates CI."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from launch.console import console as make_console
from launch.analysis import compare as cmp
from launch.shapes import rich_text, terminal


def compare(
    a: Path = typer.Argument(..., help="reference: a result.json or a directory of results"),
    b: Path = typer.Argument(..., help="candidate: a result.json or a directory of results"),
    tolerance: list[str] = typer.Option([], help="METRIC=FRACTION, e.g. total_img_per_s=0.05 (repeatable)"),
    default_tolerance: Optional[float] = typer.Option(None, help="for metrics without --tolerance"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable JSON"),
    allowed_signers: Optional[Path] = typer.Option(None, help="OpenSSH allowed-signers file for archive inputs"),
    require_signed: bool = typer.Option(False, help="refuse an archive input not signed by an allowed signer"),
    keep_disturbed: bool = typer.Option(
        False,
        help="compare pairs where a run's disturbance record says "
        "disturbed (by default such a pair cannot tell, and fails)",
    ),
):
    """Compare B with A: ratio per figure and whether B is within tolerance (noise-aware).

    Each result's kind says what is compared: a training run's img/s (total and per rank),
    communication share and step time; a collective's busbw at each message size; the halo
    proxy's time per iteration; with the kind's direction (only a worse B fails) and tolerance.
    Two single results of different kinds are refused (exit 2).

    A and B may be archives (.tar.gz from `fabric-bench archive`): they are verified and
    their signer shown. Values and intervals are recomputed from each result's samples;
    a result whose stored figures its samples do not give is flagged and fails the gate.
    A sample that is not a finite number in its plausible range (a negative, zero or
    impossible throughput, time or bandwidth) refuses its result (exit 2); the interval
    is one that a few wild samples cannot widen (docs/security.md).

    The first lines say whether both sides ran on the same stack (its digest, and its SBOM
    where one is found) or how the stacks differ ("ucx 1.13.1 vs 1.18.0").

    A pair where either run was disturbed while timed (its disturbance record,
    docs/disturbance.md) is not compared: the line names the run and the cause, and
    the gate cannot pass on it; `--keep-disturbed` compares it anyway.

    Exit code 0: every metric within tolerance; 1: something is not (or a run
    failed, has no partner, was disturbed, or disagrees with its own samples); 2: bad input.

    Example: fabric-bench compare site-a/results site-b/results --tolerance total_img_per_s=0.05
    """
    from launch.results.result import disagreements, disturbance_causes, disturbed, field_of

    from launch.provenance import stacks

    sides = []
    for side, path in (("A", a), ("B", b)):
        results, provenance = cmp.load(path, allowed_signers, require_signed)
        if provenance is not None:
            print(terminal(f"{side}: archive {path}: {provenance.line()}"), file=sys.stderr)
        sides.append(results)
    pairs, unpaired = cmp.pair(*sides)  # results of different kinds: refused before anything is printed
    stack_lines = stacks.stack_lines(stacks.of_path(a, sides[0]), stacks.of_path(b, sides[1]))
    if not as_json:
        print("\n".join(terminal(line) for line in stack_lines))
    tolerances = cmp.parse_tolerances(tolerance)
    rows, failures, left_out = [], list(unpaired), []
    for side, results in zip("AB", sides):
        failures += [f"{side} {r.run_id}: {problem}" for r in results for problem in disagreements(r)]
    for ra, rb in pairs:
        label = cmp.label(ra)
        if not rb.ok:
            failures.append(f"{label}: B is {rb.status}: {field_of(rb, 'reason')}")
        noisy = [(side, r) for side, r in (("A", ra), ("B", rb)) if disturbed(r)]
        if noisy and not keep_disturbed:
            why = "; ".join(
                f"{side} {r.run_id} was disturbed ({', '.join(disturbance_causes(r)) or 'no cause named'})"
                for side, r in noisy
            )
            left_out.append(f"{label}: cannot tell: {why}")
            failures.append(left_out[-1])
            continue
        for m in cmp.compare_pair(ra, rb, tolerances, default_tolerance):
            rows.append((label, m))
            if not m.within:
                failures.append(
                    f"{label} {m.name}: {m.b:.4g} vs {m.a:.4g} (ratio {m.ratio or 0:.3f}, tolerance {m.tolerance:.0%})"
                )
    if not rows and not failures and not left_out:
        raise cmp.UsageError("no metric in common between A and B")
    if as_json:
        print(
            json.dumps(
                {
                    "within": not failures,
                    "failures": failures,
                    "left_out": left_out,
                    "stacks": stack_lines,
                    "metrics": [
                        {
                            "run": label,
                            "metric": m.name,
                            "a": m.a,
                            "b": m.b,
                            "ratio": m.ratio,
                            "ci95_a": m.ci_a,
                            "ci95_b": m.ci_b,
                            "tolerance": m.tolerance,
                            "higher_is_better": m.higher_is_better,
                            "unit": m.unit,
                            "change": m.change,
                            "within": m.within,
                        }
                        for label, m in rows
                    ],
                },
                indent=2,
            )
        )
    else:
        table = Table(title=rich_text(f"{b} vs {a}"))
        for column in ("run", "metric", "A", "B", "B/A", "noise ±", "tolerance", "within"):
            table.add_column(column)
        for label, m in rows:
            table.add_row(
                rich_text(label),
                rich_text(m.name),
                f"{m.a:.4g}",
                f"{m.b:.4g}",
                f"{m.ratio:.3f}" if m.ratio else "-",
                f"{m.noise:.3g}",
                f"{m.tolerance:.0%}",
                ("[green]yes[/green]" if m.within else "[red]no[/red]") + (" (better)" if m.change == "better" else ""),
            )
        make_console().print(table)
        for failure in failures:
            print(f"not within: {terminal(failure)}")
    raise typer.Exit(1 if failures else 0)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
