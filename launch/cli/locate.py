"""`fabric-bench locate`: name the slow node(s) and link(s) of a Slurm allocation (launch.fleet.locate)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from launch.fleet.emulate.links import parse_rate
from launch.errors import UsageError
from launch.fleet.node_names import interface_name
from launch import shapes
from launch.shapes import terminal


def locate(
    out: Path = typer.Option(Path("locate"), "--out", "-o", help="directory for locate.json and the heat-map"),
    nodes: Optional[int] = typer.Option(None, help="nodes to allocate (outside an allocation; default: all)"),
    nodelist: Optional[str] = typer.Option(None, help="Slurm node list to allocate, e.g. n[0-3]"),
    exclude: Optional[str] = typer.Option(None, help="Slurm node list to leave out"),
    expect: Optional[str] = typer.Option(
        None, help="the expected link rate, e.g. 200mbit (default: the upper quartile of the pairs)"
    ),
    message_bytes: int = typer.Option(4 * 2**20, "--bytes", help="message size of the point-to-point test"),
    image: Optional[str] = typer.Option(None, help="run the ranks in this Apptainer image (SIF)"),
    interface: Optional[str] = typer.Option(None, help="network interface the ranks use (btl_tcp_if_include)"),
    minutes: int = typer.Option(20, help="time limit of the allocation locate makes"),
    pattern: str = typer.Option(
        "auto",
        help="all-pairs (every path), screen (ring and opposite pairs, then all "
        "pairs among the suspects) or auto (all-pairs up to 16 nodes)",
    ),
    quiet_check: float = typer.Option(
        3.0,
        help="seconds to sample every node first (one task each), so a busy node is told from a slow one (0: no check)",
    ),
):
    """Pairwise point-to-point traffic as Slurm steps; names the slow node(s) and slow link(s).

    Inside an allocation (salloc, sbatch) it uses the allocation's nodes; outside
    one it allocates --nodes (or every node) itself and cancels the job afterwards.

    Example: fabric-bench locate --nodes 4 --interface fbemu0 --out locate/
    """
    from launch.fleet import locate as locating

    if message_bytes < 4 or message_bytes % 4:
        raise UsageError(f"--bytes must be a positive multiple of 4, got {message_bytes}")
    image_ref = shapes.image("--image", image) if image else None
    if image and not os.path.isfile(image):
        raise UsageError(f"--image {image}: no such file")
    if nodes is not None and nodes < 2:
        raise UsageError(f"--nodes must be >= 2, got {nodes}")
    locating.pattern_for(pattern, 2)  # an unknown pattern: one line before any allocation
    if not 0 <= quiet_check <= 60:
        raise UsageError(f"--quiet-check must be 0-60 seconds, got {quiet_check:g}")
    if interface is not None:
        interface_name(interface, "--interface")
    expected = parse_rate(expect, "--expect") / 1e9 if expect else None
    data = locating.locate(
        out,
        nodes,
        nodelist,
        exclude,
        message_bytes,
        image_ref,
        interface,
        expected,
        minutes,
        pattern=pattern,
        quiet_seconds=quiet_check,
    )
    print(
        f"{data['pattern']}: reference {data['test']['reference_gbit_s'] * 1000:.0f} Mbit/s "
        f"({terminal(data['test']['reference_from'])}), "
        f"slow below {data['test']['threshold']:g} x; {data['rounds']} rounds, {data['steps']} steps, "
        f"{data['seconds']:.0f} s"
    )
    for name in data["slow_nodes"]:
        busy = data["busy_nodes"].get(name)
        print(
            terminal(
                f"SLOW NODE {name}"
                + (f" (but busy before the pairs: {busy}; measure again when quiet)" if busy else "")
            )
        )
    for a, b in data["slow_links"]:
        print(terminal(f"SLOW LINK {a}-{b}"))
    if not (data["slow_nodes"] or data["slow_links"] or data["failed_pairs"]):
        print("nothing named: every pair within the test")
    print(f"{out / 'locate.json'}, {out / 'heatmap.png'}, {out / 'heatmap.html'}")


def register(app: typer.Typer) -> None:
    app.command("locate")(locate)
