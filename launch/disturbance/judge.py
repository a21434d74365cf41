"""From snapshots (launch.disturbance.sample) and a result to a disturbance record.

Each signal gives its figure, its limit and a verdict (clean, disturbed, not measured);
the record's verdict is `disturbed` when any outside cause is (SIGNALS: others' CPU, steal,
memory or I/O pressure, a stopped process, foreign traffic, the GPU, a rate-limited node), with
one named cause per disturbed signal in words a reader can act on ("other processes used 0.92
of a core during the timed window (stress 0.91)"). The run's own step times are not a cause:
they make its `steadiness` (steady, unsteady, not measured), judged after the warm-up its
figures cut (the result's `steady_state`). The limits and why they are where they are:
docs/disturbance.md.

The timed window comes from the ranks' own progress records (bench.progress: the end of
every timed iteration); a benchmark without them (allreduce, halo) is judged over the
ranks' whole run, which the record says.

The run's own CPU is the largest of what counts it whole: the run's processes with the CPU of
those that ended (launch.disturbance.sample), the Slurm job's cgroup where there is one, and
the ranks' own CPU time between the window's edges (bench.record's cpu_seconds), so ranks that
lived between two looks are never someone else's. A window with fewer looks than the judgement
needs (MIN_LOOKS_INSIDE inside it, the looks around it at most MAX_SPAN_RATIO times its length
apart) is "too short to judge": its figures are kept, and it is never disturbed.
"""

from __future__ import annotations

import statistics
from typing import Any

from launch.disturbance.gpu import GpuReading, gpu_signal, gpu_words
from launch.disturbance.link import link_signal, link_words, node_link
from launch.disturbance.nodes import gpu_reading_from, snapshot_from
from launch.disturbance.sample import LOOPBACK, PAGE_BYTES, TICKS_PER_S, Snapshot
from launch.disturbance.steps import series_figures, step_times

# cause names: what `causes[].signal` holds and the battery's confusion matrix is keyed by
CPU, STEAL, MEMORY, IO, STOPPED, TRAFFIC, GPU = "cpu", "steal", "memory", "io", "stopped", "traffic", "gpu"
LINK = "link"  # a rate-limited node, among several (launch.disturbance.link)
SIGNALS = (CPU, STEAL, MEMORY, IO, STOPPED, TRAFFIC, GPU, LINK)  # outside causes: what makes a run disturbed
STEPS = "steps"  # the run's own step series: its steadiness, never a cause
TOO_SHORT = "too short to judge"  # a window with fewer looks inside it than the judgement needs
VERDICTS = ("clean", "disturbed", TOO_SHORT, "not recorded")
STEADINESS = ("steady", "unsteady", "not measured")

OTHER_CORES_LIMIT = 0.25  # other processes' CPU, in cores, averaged over the window
STEAL_CORES_LIMIT = 0.10  # the hypervisor's steal, in cores
MEMORY_SOME_LIMIT = 0.02  # share of the window some task stalled on memory (PSI "some")
SWAP_BYTES_LIMIT = 1 << 20  # swapped in + out during the window
IO_SOME_LIMIT = 0.05  # share of the window some task stalled on I/O (PSI "some")
IO_BYTES_PER_S_LIMIT = 32 << 20  # others' storage bytes per second, where the kernel has no I/O PSI
STOPPED_SNAPSHOTS_LIMIT = 1  # a run process seen stopped in this many snapshots
TRAFFIC_OVERHEAD = 1.15  # TCP/IP headers and the control traffic on top of the payload
FOREIGN_BYTES_LIMIT = 8 << 20  # and at least this much, or 25 % of the run's own bytes
FOREIGN_SHARE_LIMIT = 0.25
TOP_PROCESSES = 3  # named in a CPU cause
# what a judgement needs of the looks: one strictly inside the timed window (a stop of the run has a
# look to be seen in), and the looks around it no further apart than three times its length (its
# figures are then the window's, at most diluted or added to by twice its length around it)
MIN_LOOKS_INSIDE = 1
MAX_SPAN_RATIO = 3.0
HOST_SIGNALS = (CPU, STEAL, MEMORY, IO, STOPPED, TRAFFIC, GPU)  # judged from one host's looks
# where the run's own CPU was counted from (cpu_signal: the largest is taken)
FROM_PROCESSES = "the run's processes, ended ones included"
FROM_CGROUP = "the Slurm job's cgroup"
FROM_RANKS = "the ranks' own CPU time in the window"


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ranks_cpu(records: list[dict], progress: bool) -> dict[str, float]:
    """host -> the CPU seconds its ranks used inside the timed window, each rank's own count
    (bench.record's cpu_seconds): between its first and last progress record where the window
    is the timed iterations (a floor: the first iteration's own CPU is left out), else between
    its program's start and its last record (the window is the ranks' whole run: exact for it).
    Records from before the count carry none: their ranks count nothing here."""
    marks: dict[tuple[str, object], list[tuple[float, float]]] = {}
    begun: dict[tuple[str, object], float] = {}
    for r in records:
        cpu, at = _seconds(r.get("cpu_seconds")), _seconds(r.get("time_unix"))
        if cpu is None or at is None or (progress and r.get("kind") != "progress"):
            continue
        key = (str(r.get("host") or ""), r.get("rank"))
        marks.setdefault(key, []).append((at, cpu))
        if (start := _seconds(r.get("program_start_cpu_seconds"))) is not None:
            begun[key] = start
    out: dict[str, float] = {}
    for key, seen in marks.items():
        seen.sort()
        first = seen[0][1] if progress else begun.get(key)
        if first is not None and seen[-1][1] >= first:
            out[key[0]] = out.get(key[0], 0.0) + seen[-1][1] - first
    return {host: round(seconds, 4) for host, seconds in out.items()}


def window_of(records: list[dict]) -> dict | None:
    """The timed window from the ranks' progress records: from one iteration before the first
    timed iteration ended to the last one's end; else the ranks' whole run; None: no records.
    With it, the CPU seconds each host's ranks used in it (ranks_cpu), where they counted it."""
    ends: dict[int, list[float]] = {}
    for r in records:
        if r.get("kind") == "progress" and isinstance(r.get("step_end_unix"), (int, float)):
            ends.setdefault(r.get("rank", 0), []).append(float(r["step_end_unix"]))
    window: dict | None = None
    if ends:
        starts, last = [], []
        for times in ends.values():
            times.sort()
            gaps = [b - a for a, b in zip(times, times[1:])]
            starts.append(times[0] - (statistics.median(gaps) if gaps else 0.0))
            last.append(times[-1])
        window = {"start_unix": min(starts), "end_unix": max(last), "from": "progress records (timed iterations)"}
    begun = [r["program_start_unix"] for r in records if isinstance(r.get("program_start_unix"), (int, float))]
    ended = [r["time_unix"] for r in records if isinstance(r.get("time_unix"), (int, float))]
    if window is None and begun and ended:
        window = {
            "start_unix": min(begun),
            "end_unix": max(ended),
            "from": "the ranks' whole run (this benchmark writes no per-iteration records)",
        }
    if window is not None and (used := ranks_cpu(records, progress=bool(ends))):
        window["ranks_cpu_seconds"] = used
    return window


def bracket(snapshots: list[Snapshot], start: float, end: float) -> list[Snapshot]:
    """The snapshots that cover [start, end]: the last at or before start to the first at or after end."""
    first = max((i for i, s in enumerate(snapshots) if s.time_unix <= start), default=0)
    last = min((i for i, s in enumerate(snapshots) if s.time_unix >= end), default=len(snapshots) - 1)
    return snapshots[first : last + 1]


def _cores(ticks: float, seconds: float) -> float:
    return ticks / TICKS_PER_S / seconds if seconds > 0 else 0.0


def own_ticks(span: list[Snapshot], ranks_cpu_s: float | None) -> tuple[float, str, dict[str, float]]:
    """(the run's own CPU over the span in ticks, where it was counted from, every count in ticks):
    the largest of the run's processes' whole count, the Slurm job's cgroup (less this sampler
    where it runs in it) and the ranks' own CPU time in the window. Each can only miss some of
    the run's CPU (a rank outside the keeper's tree that ended between looks; a process that
    never joined the job; a rank's start-up before its count began), never count another's."""
    a, b = span[0], span[-1]
    counts = {FROM_PROCESSES: float(b.own_ticks - a.own_ticks)}
    if a.cgroup is not None and a.cgroup == b.cgroup and a.cgroup_usec is not None and b.cgroup_usec is not None:
        job = (b.cgroup_usec - a.cgroup_usec) / 1e6 * TICKS_PER_S
        counts[FROM_CGROUP] = job - (b.self_ticks - a.self_ticks if b.cgroup_has_self else 0)
    if ranks_cpu_s is not None:
        counts[FROM_RANKS] = ranks_cpu_s * TICKS_PER_S
    source = max(counts, key=lambda name: counts[name])
    return counts[source], source, counts


def cpu_signal(span: list[Snapshot], seconds: float, ranks_cpu_s: float | None = None) -> tuple[dict, dict]:
    """(cpu signal, steal signal): CPU used outside the run's processes and fabric-bench's own.
    `ranks_cpu_s`: the CPU seconds the ranks on this host counted themselves inside the window
    (None: not known, or the span does not cover the window)."""
    a, b = span[0], span[-1]
    cpus = sorted(set(a.cpu_busy) & set(b.cpu_busy))
    busy = sum(b.cpu_busy[c] - a.cpu_busy[c] for c in cpus)
    own, own_from, counts = own_ticks(span, ranks_cpu_s)
    harness = b.self_ticks - a.self_ticks
    other_cores = max(0.0, _cores(busy - own - harness, seconds))
    # who: every process outside the run alive at both ends, or started in between
    by_name: dict[str, float] = {}
    for key, (name, ticks) in b.foreign.items():
        before = a.foreign.get(key, (name, 0))[1]
        if ticks - before > 0:
            by_name[name] = by_name.get(name, 0.0) + _cores(ticks - before, seconds)
    top = sorted(by_name.items(), key=lambda item: -item[1])[:TOP_PROCESSES]
    unnamed = other_cores - sum(by_name.values())  # processes that ended between snapshots, the kernel
    if unnamed >= 0.05:
        top.append(("short-lived processes and the kernel", unnamed))
    run_cpus = next((s.run_cpus for s in reversed(span) if s.run_cpus), [])
    cpu = {
        "other_cores": round(other_cores, 3),
        "limit_cores": OTHER_CORES_LIMIT,
        "run_cores": round(_cores(own, seconds), 3),
        "run_cores_from": own_from,
        "run_cores_counted": {name: round(_cores(ticks, seconds), 3) for name, ticks in counts.items()},
        "harness_cores": round(_cores(harness, seconds), 3),
        "host_cpus": len(cpus),
        "run_cpus": run_cpus,
        "top": [{"name": n, "cores": round(c, 3)} for n, c in top if c >= 0.01],
        "verdict": "disturbed" if other_cores >= OTHER_CORES_LIMIT else "clean",
    }
    if run_cpus and len(run_cpus) < len(cpus):  # pinned: others on the run's own cores are what hurts
        on_run = sum(b.cpu_busy[c] - a.cpu_busy[c] for c in run_cpus if c in a.cpu_busy and c in b.cpu_busy)
        cpu["other_cores_on_run_cpus"] = round(max(0.0, _cores(on_run - own - harness, seconds)), 3)
    steal_cores = _cores(b.steal - a.steal, seconds)
    steal = {
        "steal_cores": round(steal_cores, 3),
        "limit_cores": STEAL_CORES_LIMIT,
        "verdict": "disturbed" if steal_cores >= STEAL_CORES_LIMIT else "clean",
    }
    return cpu, steal


def memory_signal(span: list[Snapshot], seconds: float) -> dict:
    a, b = span[0], span[-1]
    out: dict[str, Any] = {"limit_some_share": MEMORY_SOME_LIMIT, "limit_swap_bytes": SWAP_BYTES_LIMIT}
    if a.memory_some_us is not None and b.memory_some_us is not None and seconds > 0:
        out["some_share"] = round((b.memory_some_us - a.memory_some_us) / 1e6 / seconds, 4)
        out["full_share"] = round(((b.memory_full_us or 0) - (a.memory_full_us or 0)) / 1e6 / seconds, 4)
        out["source"] = "/proc/pressure/memory"
    if a.swapped_pages is not None and b.swapped_pages is not None:
        out["swap_bytes"] = (b.swapped_pages - a.swapped_pages) * PAGE_BYTES
    if "some_share" not in out and "swap_bytes" not in out:
        return {**out, "verdict": "not measured", "why": "no PSI and no swap counters on this kernel"}
    disturbed = out.get("some_share", 0.0) >= MEMORY_SOME_LIMIT or out.get("swap_bytes", 0) >= SWAP_BYTES_LIMIT
    return {**out, "verdict": "disturbed" if disturbed else "clean"}


def io_signal(span: list[Snapshot], seconds: float) -> dict:
    """I/O pressure over the window (PSI "some": a task waited on storage) and the storage bytes
    of the processes outside the run, the busiest named; where the kernel has no I/O PSI, those
    bytes per second are judged instead."""
    a, b = span[0], span[-1]
    out: dict[str, Any] = {"limit_some_share": IO_SOME_LIMIT}
    if a.io_some_us is not None and b.io_some_us is not None and seconds > 0:
        out["some_share"] = round((b.io_some_us - a.io_some_us) / 1e6 / seconds, 4)
        out["full_share"] = round(((b.io_full_us or 0) - (a.io_full_us or 0)) / 1e6 / seconds, 4)
        out["source"] = "/proc/pressure/io"
    by_name: dict[str, int] = {}
    for key, (name, nbytes) in b.io.items():  # a process absent at the start began in the window
        moved = nbytes - a.io.get(key, (name, 0))[1]
        if moved > 0:
            by_name[name] = by_name.get(name, 0) + moved
    if b.io or a.io:
        out["others_bytes"] = sum(by_name.values())
        out["top"] = [
            {"name": n, "bytes": v} for n, v in sorted(by_name.items(), key=lambda item: -item[1])[:TOP_PROCESSES]
        ]
    if "some_share" in out:
        disturbed = out["some_share"] >= IO_SOME_LIMIT
    elif "others_bytes" in out and seconds > 0:
        out["limit_bytes_per_s"] = IO_BYTES_PER_S_LIMIT
        disturbed = out["others_bytes"] / seconds >= IO_BYTES_PER_S_LIMIT
    else:
        return {**out, "verdict": "not measured", "why": "no I/O PSI and no readable /proc/PID/io"}
    return {**out, "verdict": "disturbed" if disturbed else "clean"}


def stopped_signal(span: list[Snapshot], interval: float) -> dict:
    """A run process seen stopped, in how many looks, and for about how long: each look that saw
    it stopped counts the time since the look before (`interval` for the first look)."""
    seen: dict[int, tuple[str, int, float]] = {}
    for i, s in enumerate(span):
        gap = s.time_unix - span[i - 1].time_unix if i else interval
        for pid, name in s.stopped:
            _, n, about = seen.get(pid, (name, 0, 0.0))
            seen[pid] = (name, n + 1, about + gap)
    snapshots = max((n for _, n, _ in seen.values()), default=0)
    return {
        "processes": [
            {"pid": pid, "name": name, "snapshots": n, "about_seconds": round(about, 2)}
            for pid, (name, n, about) in sorted(seen.items())
        ],
        "limit_snapshots": STOPPED_SNAPSHOTS_LIMIT,
        "verdict": "disturbed" if snapshots >= STOPPED_SNAPSHOTS_LIMIT else "clean",
    }


def nodes_of(result: dict) -> int:
    from launch.results.result import typed

    fields = typed(result)
    return (fields.spec.nodes if fields is not None and fields.spec is not None else None) or 1


def shared_memory(fields: Any) -> str | None:
    """Why a one-node run's ranks exchange through shared memory rather than the loopback (None:
    through the loopback, as gloo's and gRPC's TCP do): GPUs (NCCL's shared memory or P2P), and
    Horovod under mpirun, whose Open MPI takes its shared-memory btl (vader) between ranks of one
    node unless the run's own OMPI_MCA_btl leaves it out (a 2-rank run here moved 0 MB on lo)."""
    spec = fields.spec
    if (getattr(spec, "gpus_per_node", None) or 0) > 0:
        return "one node's GPUs exchange through NCCL's shared memory or P2P, not the loopback"
    if fields.engine != "horovod" or getattr(spec, "controller", None) != "mpi":
        return None
    env = getattr(spec, "extra_env", None)
    btl = str(env.get("OMPI_MCA_btl") or "") if isinstance(env, dict) else ""
    names = {n.strip() for n in btl.lstrip("^").split(",") if n.strip()}
    vader = not btl or (bool(names & {"vader", "sm"}) != btl.startswith("^"))
    return "Open MPI's shared memory (vader) carries one node's Horovod exchange, not the loopback" if vader else None


def own_bytes(result: dict) -> tuple[float | None, str]:
    """What the benchmark itself moved through one node's interface, sent + received (an upper
    bound: warm-ups counted whole), and how that was reckoned (its kind's count: launch.kinds).
    On one node its ranks' exchange goes through the loopback, where each byte is counted as
    sent and as received: the same count with every rank on the node."""
    from launch.kinds import kind_of
    from launch.results.result import typed

    fields = typed(result)
    ranks = fields.world_size if fields is not None else None
    nodes = nodes_of(result)
    if fields is None or not ranks:
        return None, "the run's ranks are not known"
    if ranks < 2:
        return 0.0, "one rank: nothing exchanged"
    if nodes < 2 and (why := shared_memory(fields)) is not None:
        return 0.0, why
    kind = kind_of(result)
    counted = kind.own_bytes(fields, ranks, ranks // nodes) if kind is not None else None
    if counted is None:
        return None, "this benchmark's own bytes are not known"
    return counted[0] * TRAFFIC_OVERHEAD, counted[1] + (" (one node: through the loopback)" if nodes < 2 else "")


def traffic_signal(span: list[Snapshot], result: dict) -> dict:
    """Bytes on the run's interfaces beyond its own: the fabric interface the run's variables name
    and, where every rank is on this one node, the loopback its ranks exchange through."""
    a, b = span[0], span[-1]
    counters = {n: (a.net[n], b.net[n]) for n in sorted(set(a.net) & set(b.net))}
    if nodes_of(result) < 2 and a.loopback is not None and b.loopback is not None:
        counters.setdefault(LOOPBACK, (a.loopback, b.loopback))
    if not counters:
        return {"verdict": "not measured", "why": "the run's fabric interface was not named or not readable"}
    names = sorted(counters)
    moved = sum((end[0] - start[0]) + (end[1] - start[1]) for start, end in counters.values())
    own, how = own_bytes(result)
    if own is None or (nodes_of(result) < 2 and LOOPBACK not in counters):
        own = 0.0  # one node's fabric interface: nothing of the run's crosses it
    foreign = max(0.0, moved - own)
    limit = max(FOREIGN_BYTES_LIMIT, FOREIGN_SHARE_LIMIT * own)
    return {
        "interfaces": names,
        "bytes_moved": moved,
        "own_bytes_expected": round(own),
        "own_bytes_how": how,
        "foreign_bytes": round(foreign),
        "limit_bytes": round(limit),
        "verdict": "disturbed" if foreign >= limit else "clean",
    }


def cause_words(signal: str, figures: dict, seconds: float, window: str = "the timed window") -> str:
    """One cause in words; `window` names the span sampled (a run's timed window, a quiet check)."""
    if signal == CPU:
        who = ", ".join(f"{t['name']} {t['cores']:.2f}" for t in figures.get("top", []))
        where = (
            f"; {figures['other_cores_on_run_cpus']:.2f} on the run's CPUs"
            if "other_cores_on_run_cpus" in figures
            else ""
        )
        return (
            f"other processes used {figures['other_cores']:.2f} of a core during {window} "
            f"({seconds:.1f} s){where}" + (f" (the busiest: {who})" if who else "")
        )
    if signal == STEAL:
        return f"the hypervisor took {figures['steal_cores']:.2f} of a core (steal) during {window}"
    if signal == MEMORY:
        parts = []
        if figures.get("some_share", 0.0) >= MEMORY_SOME_LIMIT:
            parts.append(f"some task waited on memory {figures['some_share']:.0%} of {window} (PSI)")
        if figures.get("swap_bytes", 0) >= SWAP_BYTES_LIMIT:
            parts.append(f"{figures['swap_bytes'] / 2**20:.1f} MiB swapped in and out")
        return "memory pressure: " + "; ".join(parts)
    if signal == IO:
        who = ", ".join(f"{t['name']} {t['bytes'] / 1e6:.0f} MB" for t in figures.get("top", []) if t["bytes"] >= 1e6)
        how = (
            f"some task waited on storage {figures['some_share']:.0%} of {window} (PSI)"
            if "some_share" in figures
            else f"other processes moved {figures.get('others_bytes', 0) / 1e6:.0f} MB to and from storage"
        )
        return f"I/O pressure: {how}" + (f" (the busiest: {who})" if who else "")
    if signal == STOPPED:
        who = ", ".join(f"{p['name']} (pid {p['pid']}) ~{p['about_seconds']:g} s" for p in figures["processes"])
        return f"a process of the run was stopped (SIGSTOP or a debugger): {who}"
    if signal == TRAFFIC:
        return (
            f"{figures['foreign_bytes'] / 1e6:.0f} MB of foreign traffic on {', '.join(figures['interfaces'])} "
            f"beyond the benchmark's own {figures['own_bytes_expected'] / 1e6:.0f} MB"
        )
    if signal == GPU:
        return gpu_words(figures)
    if signal == LINK:
        return link_words(figures)
    return f"signal {signal}: " + "; ".join(str(r) for r in figures.get("reasons", []))


def steps_signal(result: dict) -> dict:
    """The run's steadiness: its step series after the warm-up its figures cut (steady_cut)."""
    from launch.kinds import kind_of
    from launch.results.result import as_result, steady_cut, typed

    kind, fields = kind_of(result), typed(result)
    samples = kind.samples(fields) if kind is not None and fields is not None else []
    if kind is None or len(samples) < 2:
        return {"verdict": "not measured", "why": "no per-iteration samples"}
    cut = min(steady_cut(as_result(result)), len(samples) - 1)  # (the result being built: a mapping)
    return {**series_figures(step_times(samples[cut:], kind.metric.higher_is_better)), "warmup_steps_cut": cut}


def host_signals(
    snapshots: list[Snapshot],
    window: dict | None,
    result: dict,
    interval: float,
    gpu_readings: list[GpuReading] | None = None,
    hosts: set[str] | None = None,
) -> tuple[dict[str, dict], dict | None]:
    """One host's signals over the timed window (cpu, steal, memory, io, stopped, traffic, gpu), and the
    window with how much of it the snapshots covered; no signals where they do not bracket it.
    `hosts`: the rank hosts this host's looks saw (their ranks' own CPU counts as the run's;
    None: every rank's). Where the looks are too few for the window (short_of) every signal
    keeps its figures and reads TOO_SHORT (window.too_short says why)."""
    signals: dict[str, dict] = {}
    if window is None or len(snapshots) < 2:
        return signals, window
    start, end = window["start_unix"], window["end_unix"]
    span = bracket(snapshots, start, end)
    if len(span) < 2:
        return signals, window
    seconds = span[-1].time_unix - span[0].time_unix
    inside = sum(1 for s in span if start < s.time_unix < end)
    window = {
        **window,
        "seconds": round(end - start, 3),
        "sampled_seconds": round(seconds, 3),
        "snapshots": len(span),
        "looks_inside": inside,
    }
    counted = window.get("ranks_cpu_seconds") or {}
    here = [v for h, v in counted.items() if hosts is None or h in hosts]
    covered = span[0].time_unix <= start and span[-1].time_unix >= end  # the ranks' counts lie inside the span
    signals[CPU], signals[STEAL] = cpu_signal(span, seconds, sum(here) if here and covered else None)
    signals[MEMORY] = memory_signal(span, seconds)
    signals[IO] = io_signal(span, seconds)
    signals[STOPPED] = stopped_signal(span, interval)
    signals[TRAFFIC] = traffic_signal(span, result)
    if gpu_readings is not None:  # the run asked for GPUs and this host has nvidia-smi
        # the readings inside the window, and the last one, taken as the run ended
        readings = [r for r in gpu_readings if window["start_unix"] <= r.time_unix <= window["end_unix"]]
        later = [r for r in gpu_readings if r.time_unix > window["end_unix"]]
        signals[GPU] = gpu_signal(readings + later[:1])
    if why := short_of(window["looks_inside"], end - start, seconds):
        window["too_short"] = why
        for name in HOST_SIGNALS:
            if name in signals and signals[name].get("verdict") in ("clean", "disturbed"):
                signals[name] = {**signals[name], "verdict": TOO_SHORT, "would_read": signals[name]["verdict"]}
    return signals, window


def short_of(looks_inside: int, window_s: float, sampled_s: float) -> str | None:
    """Why the looks around a window are too few to judge it (None: enough): fewer than
    MIN_LOOKS_INSIDE inside it, or the looks around it more than MAX_SPAN_RATIO times its length apart."""
    if looks_inside < MIN_LOOKS_INSIDE:
        return f"{looks_inside} look(s) inside the {window_s:.2f} s window, {MIN_LOOKS_INSIDE} needed"
    if sampled_s > MAX_SPAN_RATIO * window_s:
        return (
            f"the looks around the {window_s:.2f} s window are {sampled_s:.2f} s apart, "
            f"over {MAX_SPAN_RATIO:g} times its length"
        )
    return None


def causes_of(signals: dict[str, dict], seconds: float, node: str | None = None) -> list[dict]:
    """One cause per disturbed signal, in SIGNALS order; on a node of several, named by it."""
    return [
        {
            "signal": name,
            "words": (f"{node}: " if node else "") + cause_words(name, signals[name], seconds),
            **({"node": node} if node else {}),
        }
        for name in SIGNALS
        if signals.get(name, {}).get("verdict") == "disturbed"
    ]


def verdict_of(causes: list[dict], measured: bool, too_short: bool = False) -> str:
    """disturbed (an outside cause), too short to judge (a window with too few looks: never
    disturbed by what those looks saw), clean, or not recorded (nothing sampled)."""
    if causes:
        return "disturbed"
    return TOO_SHORT if too_short else "clean" if measured else "not recorded"


def too_short(window: dict | None) -> bool:
    return bool((window or {}).get("too_short"))


def steadiness_of(steps: dict) -> dict:
    """The record's steadiness fields from its steps signal (launch.disturbance.steps)."""
    verdict = steps.get("verdict") if steps.get("verdict") in STEADINESS else "not measured"
    return {"steadiness": verdict, "unsteady_because": list(steps.get("reasons", [])) if verdict == "unsteady" else []}


def record(
    snapshots: list[Snapshot],
    records: list[dict],
    result: dict,
    interval: float,
    cost: dict | None = None,
    host: str | None = None,
    gpu_readings: list[GpuReading] | None = None,
) -> dict:
    """The disturbance record of one run sampled on this host (what result.json's `disturbance` holds)."""
    from launch.results.result import typed

    fields = typed(result)
    hosts = list(fields.hosts or []) if fields is not None else []
    not_sampled = sorted({h for h in hosts if host and h != host and not h.startswith("fbemu-")})
    sampler = {**(cost or {}), "host": host, "not_sampled_hosts": not_sampled}
    seen = {str(r.get("host") or "") for r in records} - set(not_sampled)  # rank hosts sampled here
    here, window = host_signals(snapshots, window_of(records), result, interval, gpu_readings, seen)
    signals = {STEPS: steps_signal(result), **here}
    causes = causes_of(signals, (window or {}).get("sampled_seconds", 0.0))
    measured_host = any(s in signals for s in (CPU, MEMORY))
    return {
        "verdict": verdict_of(causes, measured_host, too_short(window)),
        "causes": causes,
        **steadiness_of(signals[STEPS]),
        "window": window,
        "signals": signals,
        "sampler": sampler,
    }


def node_record(data: dict, window: dict | None, result: dict) -> dict:
    """One node's record from its sampler's file (launch.disturbance.nodes) over the run's timed
    window: its verdict, causes, signals, window and the sampler's cost; a file that could not be
    read, or does not hold snapshots, reads as not recorded, with why."""
    if "error" in data:
        return {"verdict": "not recorded", "why": data["error"], "causes": []}
    host = str(data.get("host") or "?")
    try:
        snapshots = [snapshot_from(s) for s in data["snapshots"]]
        readings = [gpu_reading_from(r) for r in data.get("gpu_readings", [])] if data.get("gpus") else None
        interval = float(data.get("interval_s", 0.5))
    except (KeyError, TypeError, ValueError) as exc:
        return {"verdict": "not recorded", "why": f"unreadable sampler file ({type(exc).__name__})", "causes": []}
    signals, window = host_signals(snapshots, window, result, interval, readings, {host})
    causes = causes_of(signals, (window or {}).get("sampled_seconds", 0.0), host)
    return {
        "verdict": verdict_of(causes, any(s in signals for s in (CPU, MEMORY)), too_short(window)),
        "causes": causes,
        "window": window,
        "signals": signals,
        "sampler": {**(data["cost"] if isinstance(data.get("cost"), dict) else {}), "host": host},
    }


def nodes_record(
    files: dict[str, dict], records: list[dict], result: dict, here_cost: dict | None, here_host: str | None
) -> dict:
    """The record of a run sampled on every node (under Slurm): each node judged on its own
    snapshots, the nodes' links against each other, the steps once. fabric-bench's own host
    holds no rank here: its sampler's cost is kept, its load is not judged."""
    from launch.results.result import typed

    timed = window_of(records)
    nodes = {host: node_record(data, timed, result) for host, data in files.items()}
    links = {
        host: node_link([r for r in data["link"] if isinstance(r, dict)])
        for host, data in files.items()
        if "error" not in data and data.get("interface") and isinstance(data.get("link"), list)
    }
    interface = next((str(d["interface"]) for d in files.values() if d.get("interface")), "")
    signals = {STEPS: steps_signal(result), LINK: link_signal(links, interface)}
    fields = typed(result)
    hosts = sorted(set(fields.hosts or [])) if fields is not None else []
    window = next((n["window"] for n in nodes.values() if n.get("window")), timed)
    causes = causes_of(signals, (window or {}).get("sampled_seconds", 0.0))
    for host in sorted(nodes):
        causes += nodes[host]["causes"]
    measured = any(n["verdict"] in ("clean", "disturbed", TOO_SHORT) for n in nodes.values())
    short = any(n["verdict"] == TOO_SHORT for n in nodes.values())
    return {
        "verdict": verdict_of(causes, measured, short),
        "causes": causes,
        **steadiness_of(signals[STEPS]),
        "window": window,
        "signals": signals,
        "nodes": nodes,
        "sampler": {
            **(here_cost or {}),
            "host": here_host,
            "per_node": True,
            "not_sampled_hosts": sorted(h for h in hosts if h not in nodes),
        },
    }
