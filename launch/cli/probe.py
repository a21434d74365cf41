"""`fabric-bench probe`: host facts and a usable/not verdict per fabric."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from launch.console import console as make_console
from launch.site.probe import HostFacts, collect, probe_report, verdicts


def facts_table(facts: HostFacts) -> Table:
    table = Table(title="Host facts", show_header=False)
    table.add_column("fact", style="bold")
    table.add_column("value")
    gpus = ", ".join(f"{g.name} ({g.memory_mib} MiB)" for g in facts.gpus)
    nics = ", ".join(
        f"{n.name} {n.operstate}{f' {n.speed_mbps} Mb/s' if n.speed_mbps else ''} mtu {n.mtu}" for n in facts.nics
    )
    rdma = ", ".join(
        f"{p.device}:{p.port} {p.state} {p.link_layer or '?'}{f' {p.rate_gbps:g} Gb/s' if p.rate_gbps else ''}"
        for p in facts.rdma_ports
    )
    ucx = ", ".join(sorted({f"{t.transport}/{t.device}" for t in facts.ucx_transports}))
    mpi = f"{facts.mpi.flavour} {facts.mpi.version}" if facts.mpi.version else "-"
    if facts.mpi.components:
        mpi += "  pml: " + ",".join(facts.mpi.components.get("pml", []))
    slurm = (
        f"{facts.slurm_version} (mpi: {', '.join(facts.slurm_mpi_plugins) or '?'})"
        if facts.slurm_version
        else slurm_absent(facts.tools.get("sinfo_version", "absent"))
    )
    runtimes = ", ".join(f"{name} {version}" for name, version in facts.runtimes.items() if version)
    for name, value in (
        ("CPUs", f"{facts.cpu_count} x {facts.cpu_model}"),
        ("GPUs", gpus or facts.tools.get("nvidia_smi", "-")),
        ("NICs", nics or "-"),
        ("RDMA ports", rdma or "-"),
        ("/dev/infiniband", ", ".join(facts.infiniband_dev_nodes) or "-"),
        (
            "Omni-Path",
            f"/dev/hfi1*: {', '.join(facts.hfi_dev_nodes) or 'none'}; libpsm2: {'yes' if facts.libpsm2 else 'no'}",
        ),
        ("libfabric", ", ".join(facts.libfabric_providers) or facts.tools.get("fi_info_list", "-")),
        ("UCX", ucx or facts.tools.get("ucx_info", "-")),
        ("MPI", mpi),
        ("Slurm", slurm),
        ("runtimes", runtimes or "none"),
    ):
        table.add_row(name, value)
    return table


def slurm_absent(sinfo: str) -> str:
    """Why no Slurm version was read, as a user reads it: a client with no cluster configured is
    not an error of this host."""
    if "configuration source" in sinfo:
        return "client installed, no cluster configured (no slurm.conf; SLURM_CONF names one)"
    return "not installed" if sinfo == "absent" else sinfo


def topology_table(facts: HostFacts) -> Table:
    """NUMA nodes, the NUMA node of each NIC, and nvidia-smi topo -m's GPU rows (nearest NICs)."""
    table = Table(title="Topology")
    for column in ("what", "NUMA node", "CPUs / nearest NICs"):
        table.add_column(column)
    for node, cpus in facts.numa.items():
        table.add_row(f"node{node}", str(node), cpus)
    for name, device_node in facts.device_numa.items():
        table.add_row(name, "?" if device_node is None else str(device_node), "")
    topo = facts.gpu_topology
    for gpu in topo.gpus if topo else []:
        assert topo is not None
        nearest = [topo.nics.get(n) or n for n in topo.nearest_nics(gpu.index)]
        table.add_row(
            f"GPU{gpu.index}",
            "?" if gpu.numa_affinity is None else str(gpu.numa_affinity),
            f"CPUs {gpu.cpu_affinity or '?'}; NICs {', '.join(nearest) or '-'}",
        )
    if not topo:
        seen = facts.tools.get("nvidia_smi_topo", "absent")
        table.caption = (
            "GPUs: none (no nvidia-smi)" if seen == "absent" else f"GPUs: no topology (nvidia-smi topo -m: {seen})"
        )
    return table


def verdict_table(facts: HostFacts) -> Table:
    table = Table(title="Fabrics")
    for column in ("fabric", "usable", "why"):
        table.add_column(column)
    for name, verdict in verdicts(facts).items():
        table.add_row(name, "[green]yes[/green]" if verdict.usable else "[red]no[/red]", verdict.reason)
    return table


def probe(json_output: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """Probe this host: CPUs, GPUs, NICs, RDMA, libfabric, UCX, MPI, Slurm, runtimes.

    Example: fabric-bench probe --json > host.json
    """
    facts = collect()
    if json_output:
        print(json.dumps(probe_report(facts), indent=2))
        return
    console = make_console()
    console.print(facts_table(facts))
    console.print(topology_table(facts))
    console.print(verdict_table(facts))


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
