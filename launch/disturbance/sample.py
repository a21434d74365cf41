"""Sampling the host around a run: what /proc says, every 0.1-0.5 s, from one thread.

The thread runs in fabric-bench's own process (launch.ranks.execute starts it beside the run it
already watches): no extra process, nothing per rank. Each snapshot holds

- the kernel's CPU counters (/proc/stat: busy ticks per CPU, steal);
- every process's CPU ticks (/proc/PID/stat), split into the run's own (the keeper's
  descendants and the ranks named by their heartbeats, with theirs) and everyone else's;
- the run's CPU counted whole (own_ticks): the keeper is a subreaper, so every process of its
  tree that ended was reaped inside it and its CPU moved to its reaper's cutime + cstime; the
  tree's utime + stime + cutime + cstime is all the CPU the run's processes used so far, those
  that lived between two looks included. Once the keeper itself is reaped (by this process),
  its total is in this process's RUSAGE_CHILDREN. Ranks outside the keeper's tree (srun's
  steps on this host) are counted per process, from one look to the next;
- the CPU of the Slurm job's cgroup where the ranks (or this sampler) run in one (cpu.stat
  usage_usec under cgroup v2, cpuacct.usage under v1): every process of the job, whoever
  reaped it;
- which of the run's processes were stopped (state T or t: SIGSTOP, a debugger);
- memory pressure (/proc/pressure/memory where the kernel has PSI) and swap traffic
  (/proc/vmstat pswpin/pswpout);
- I/O pressure (/proc/pressure/io) and the storage bytes of every other process
  (/proc/PID/io read_bytes + write_bytes, where readable): read for all at the first
  snapshot, then again only for a process that ran, waited on I/O (state D) or is new since
  the last one, its last figure carried otherwise (reading ~150 more files every snapshot
  would double the sampler's cost);
- the byte counters of the run's fabric interfaces and of its loopback, read through a rank's
  own network namespace (/proc/PID/net/dev), so an emulated node's interfaces are counted too.

The interval adapts to the run's length, which is not known before it ends: the looks
come every SHORTEST_INTERVAL_S for the first seconds, then every elapsed / LOOKS_PER_ELAPSED,
up to INTERVAL_S, so a run of a second gets about ten looks and a run of minutes one every
0.5 s (the cost: docs/disturbance.md).

Where the run asked for GPUs and this host has nvidia-smi, every GPU_INTERVAL_S it also reads
the GPUs' clock-event reasons, clocks and processes (launch.disturbance.gpu).

Only this host is sampled here; under Slurm every node of the run runs this sampler on its own
(launch.disturbance.nodes); elsewhere ranks on other nodes are named as not sampled.
The sampler times itself: `cost` is the CPU its own reads took (nvidia-smi's included).
"""

from __future__ import annotations

import json
import os
import re
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from launch.disturbance import gpu

INTERVAL_S = 0.5  # the longest interval: a 1 s stop is seen in 1-2 snapshots; the cost halves from 0.25 s
SHORTEST_INTERVAL_S = 0.1  # a run's first looks: a 1 s run gets about ten (1.7-5 % of a core meanwhile)
LOOKS_PER_ELAPSED = 20  # then one look every elapsed / 20: from 2 s on the interval grows, 0.5 s from 10 s
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
STOPPED_STATES = ("T", "t")
IO_WAIT_STATE = "D"
LOOPBACK = "lo"


@dataclass
class Process:
    pid: int
    ppid: int
    name: str
    state: str
    ticks: int  # utime + stime
    start: int  # start time in ticks since boot: a pid reused is another process
    child_ticks: int = 0  # cutime + cstime: the children it reaped (theirs, and what they reaped)


@dataclass
class Snapshot:
    time_unix: float
    cpu_busy: dict[int, int]  # cpu -> user + nice + system ticks
    steal: int  # ticks, all CPUs
    own_ticks: int  # the run's processes' CPU so far, whole (Sampler.kept_total), outside ranks look to look
    self_ticks: int  # fabric-bench's own process (the harness and this sampler)
    foreign: dict[tuple[int, int], tuple[str, int]]  # (pid, start) -> (name, ticks) of everyone else
    own: dict[tuple[int, int], int]  # (pid, start) -> ticks of the run's processes
    stopped: list[tuple[int, str]]  # run processes stopped now: (pid, name)
    memory_some_us: int | None  # PSI: time some task stalled on memory (None: no PSI)
    memory_full_us: int | None
    swapped_pages: int | None  # pswpin + pswpout
    net: dict[str, tuple[int, int]] = field(default_factory=dict)  # interface -> (rx, tx) bytes
    run_cpus: list[int] = field(default_factory=list)  # the union of the ranks' affinity
    io_some_us: int | None = None  # PSI: time some task stalled on I/O (None: no PSI)
    io_full_us: int | None = None
    # (pid, start) -> (name, storage bytes read + written) of everyone else, where readable
    io: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    loopback: tuple[int, int] | None = None  # the ranks' lo: (rx, tx) bytes
    cgroup: str | None = None  # the Slurm job's cgroup the run's processes are in (None: none found)
    cgroup_usec: int | None = None  # its CPU so far (cpu.stat usage_usec; cpuacct.usage / 1000 under v1)
    cgroup_has_self: bool = False  # this sampler runs in it too (a node's sampler is a step of the job)


def read_text(path: str) -> str | None:
    """A /proc file's text (os.read: a Python file object costs twice the kernel's own work here)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_stat_line(text: str) -> Process | None:
    """One /proc/PID/stat (the name may hold spaces and parentheses: split at the last ')')."""
    left, sep, rest = text.rpartition(")")
    if not sep or "(" not in left:
        return None
    pid_text, _, name = left.partition(" (")
    fields = rest.split()
    try:
        return Process(
            int(pid_text),
            int(fields[1]),
            name,
            fields[0],
            int(fields[11]) + int(fields[12]),
            int(fields[19]),
            int(fields[13]) + int(fields[14]),
        )
    except (ValueError, IndexError):
        return None


def reaped_ticks() -> float:
    """The CPU of this process's children that ended and were reaped (RUSAGE_CHILDREN), in ticks."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (used.ru_utime + used.ru_stime) * TICKS_PER_S


def interval_at(elapsed_s: float) -> float:
    """The adaptive interval after `elapsed_s` of a run: SHORTEST_INTERVAL_S, then elapsed / 20, up to INTERVAL_S."""
    return min(INTERVAL_S, max(SHORTEST_INTERVAL_S, elapsed_s / LOOKS_PER_ELAPSED))


SLURM_JOB = re.compile(r"^(.*?/job_\d+)(?:/|$)")  # a Slurm job's cgroup (task/cgroup, proctrack/cgroup)


def job_cgroup(text: str | None) -> tuple[str, str] | None:
    """(controller, path of the Slurm job's cgroup) from a /proc/PID/cgroup: the v2 line ("0::")
    where Slurm put the process in one, else the v1 line of the cpuacct controller; None: the
    process is in no Slurm job's cgroup."""
    found = None
    for line in (text or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        match = SLURM_JOB.match(path)
        if match is None:
            continue
        if number == "0" and not controllers:
            return "", match.group(1)
        if "cpuacct" in controllers.split(","):
            found = (controllers, match.group(1))
    return found


def cgroup_usec(root: str, where: tuple[str, str]) -> int | None:
    """A cgroup's CPU so far, in microseconds: cpu.stat's usage_usec under v2 (at ROOT, or
    ROOT/unified on a hybrid host), cpuacct.usage (nanoseconds) under v1; None: unreadable."""
    controllers, path = where
    if not controllers:
        for base in (root, f"{root}/unified"):
            for line in (read_text(f"{base}{path}/cpu.stat") or "").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec" and value.strip().isdigit():
                    return int(value)
        return None
    for mount in (controllers, "cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
        text = (read_text(f"{root}/{mount}{path}/cpuacct.usage") or "").strip()
        if text.isdigit():
            return int(text) // 1000
    return None


def processes(proc: str = "/proc") -> dict[int, Process]:
    found = {}
    for entry in os.listdir(proc):
        if entry.isdigit() and (text := read_text(f"{proc}/{entry}/stat")) and (p := parse_stat_line(text)):
            found[p.pid] = p
    return found


def cpu_counters(proc: str = "/proc") -> tuple[dict[int, int], int]:
    """(cpu -> busy ticks, steal ticks of all CPUs) from /proc/stat."""
    busy, steal = {}, 0
    for line in (read_text(f"{proc}/stat") or "").splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(v) for v in values]
        busy[int(name[3:])] = ticks[0] + ticks[1] + ticks[2]  # user (guest included) + nice + system
        steal += ticks[7] if len(ticks) > 7 else 0
    return busy, steal


def psi_totals(text: str | None) -> tuple[int | None, int | None]:
    """(some, full) total stall microseconds of a /proc/pressure/* file; None where absent."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        kind, *pairs = line.split()
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key == "total" and value.isdigit():
                out[kind] = int(value)
    return out.get("some"), out.get("full")


def storage_bytes(text: str | None) -> int | None:
    """read_bytes + write_bytes of a /proc/PID/io (what reached the storage layer); None: unreadable."""
    counters = dict(line.split(": ", 1) for line in (text or "").splitlines() if ": " in line)
    try:
        return int(counters["read_bytes"]) + int(counters["write_bytes"])
    except (KeyError, ValueError):
        return None


def swapped_pages(text: str | None) -> int | None:
    counters = dict(line.split()[:2] for line in (text or "").splitlines() if len(line.split()) >= 2)
    if "pswpin" not in counters:
        return None
    return int(counters["pswpin"]) + int(counters.get("pswpout", 0))


def interface_bytes(text: str | None, names: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """interface -> (rx bytes, tx bytes) from a /proc/.../net/dev, for the `names` asked."""
    out = {}
    for line in (text or "").splitlines()[2:]:
        name, _, values = line.partition(":")
        fields = values.split()
        if name.strip() in names and len(fields) >= 9:
            out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def heartbeat_pids(record_dir: Path | None, proc: str = "/proc") -> set[int]:
    """The ranks' pids, from their heartbeats (bench.progress): ranks a launcher started outside
    the keeper's tree (srun's steps on this host) are the run's own too. A pid counts only where
    that process names the run's record directory on its command line: a rank in a container's
    own pid namespace writes a pid that means another process (even init) out here."""
    pids: set[int] = set()
    if record_dir is None:
        return pids
    for path in record_dir.glob("heartbeat-*.json"):
        try:
            pid = json.loads(path.read_text().strip()).get("pid")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(pid, int) and pid > 1 and str(record_dir) in (read_text(f"{proc}/{pid}/cmdline") or ""):
            pids.add(pid)
    return pids


def same_netns(proc: str, pid: int) -> bool:
    try:
        return os.readlink(f"{proc}/{pid}/ns/net") == os.readlink(f"{proc}/self/ns/net")
    except OSError:
        return False


def tree_of(roots: set[int], table: dict[int, Process]) -> set[int]:
    """`roots` and every descendant of them present in `table`."""
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class Sampler:
    """Snapshots of this host every `interval` s while a run goes on (a daemon thread)."""

    def __init__(
        self,
        root_pid: int,
        record_dir: Path | None = None,
        interfaces: tuple[str, ...] = (),
        interval: float | None = None,
        proc: str = "/proc",
        gpus: bool = False,
        cgroup_root: str = "/sys/fs/cgroup",
    ):
        """`root_pid`: the keeper (a child of this process) or this process itself; `interval`:
        a fixed interval between looks, None: adaptive (interval_at)."""
        self.root_pid, self.record_dir, self.interfaces = root_pid, record_dir, interfaces
        self.adaptive = interval is None
        self.interval = INTERVAL_S if interval is None else interval  # the longest, where adaptive
        self.proc, self.gpus, self.cgroup_root = proc, gpus, cgroup_root
        self.snapshots: list[Snapshot] = []
        self.gpu_readings: list[gpu.GpuReading] = []
        self._gpu_read_at = 0.0
        self.cost_cpu_s = 0.0  # CPU time of this thread's reads (time.thread_time)
        self.cost_wall_s = 0.0
        self.ranks: set[int] = set()
        self._outside_total = 0  # ranks outside the keeper's tree: their CPU, look to look
        self._root_seen: tuple[float, int, bool] | None = None  # (reaped, tree total, root is our child), last look
        self._job: tuple[str, str] | None = None  # the Slurm job's cgroup (job_cgroup), once found
        self._job_has_self = False
        self._looked_for_job: set[int] | None = None  # the ranks looked up (None: not even this process yet)
        self._io: dict[tuple[int, int], tuple[str, int]] = {}  # others' storage bytes, as last read
        self._io_unreadable: set[tuple[int, int]] = set()
        self._in_my_netns: bool | None = None  # the run's processes share this process's network namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="disturbance-sampler", daemon=True)
        self._self = os.getpid()

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> "Sampler":
        self._stop.set()
        self._thread.join()
        return self

    def _loop(self) -> None:
        started = time.monotonic()
        while True:
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            try:
                self.take()
            except OSError:  # /proc unreadable this once: the next snapshot covers it
                pass
            self.cost_cpu_s += time.thread_time() - cpu0
            self.cost_wall_s += time.perf_counter() - wall0
            wait = interval_at(time.monotonic() - started) if self.adaptive else self.interval
            if self._stop.wait(wait):
                cpu0 = time.thread_time()
                try:
                    self.take(last=True)  # the last snapshot, at the end of the run
                except OSError:
                    pass
                self.cost_cpu_s += time.thread_time() - cpu0
                return

    def take(self, last: bool = False) -> Snapshot:
        now = time.time()
        busy, steal = cpu_counters(self.proc)
        for _ in range(3):  # the keeper reaped (by the main thread) while the table was read: again
            reaped = reaped_ticks()
            table = processes(self.proc)
            if reaped_ticks() == reaped:
                break
        if len(self.ranks) < 64:  # heartbeats appear once ranks start; read them until found
            self.ranks |= heartbeat_pids(self.record_dir, self.proc)
        kept = tree_of({self.root_pid}, table) - {self._self}
        own_pids = kept | (tree_of(self.ranks, table) - {self._self})
        own = {(p.pid, p.start): p.ticks + p.child_ticks for pid, p in table.items() if pid in own_pids}
        previous = self.snapshots[-1].own if self.snapshots else {}
        # ranks outside the keeper's tree accumulate per process: one that exits takes its last interval with it
        outside = [(table[pid].pid, table[pid].start) for pid in own_pids - kept]
        self._outside_total += sum(own[key] - previous.get(key, 0) for key in outside)
        own_ticks = round(self.kept_total(sum(table[p].ticks + table[p].child_ticks for p in kept), reaped, table))
        cgroup = self.job_cgroup(own_pids)
        me = table.get(self._self)
        foreign = {
            (p.pid, p.start): (p.name, p.ticks) for pid, p in table.items() if pid not in own_pids and pid != self._self
        }
        stopped = [(p.pid, p.name) for pid, p in table.items() if pid in own_pids and p.state in STOPPED_STATES]
        some, full = psi_totals(read_text(f"{self.proc}/pressure/memory"))
        io_some, io_full = psi_totals(read_text(f"{self.proc}/pressure/io"))
        io = self.others_io(foreign, table)
        net: dict[str, tuple[int, int]] = {}
        loopback = None
        for pid in sorted(self.ranks & set(table)) or [self.root_pid]:  # a rank's network namespace
            counters = interface_bytes(read_text(f"{self.proc}/{pid}/net/dev"), (*self.interfaces, LOOPBACK))
            loopback = counters.get(LOOPBACK, loopback)
            net = {name: value for name, value in counters.items() if name in self.interfaces}
            if counters and self._in_my_netns is None:
                self._in_my_netns = same_netns(self.proc, pid)
            if net or not self.interfaces:
                break
        if loopback is None and self._in_my_netns:  # the run's processes are gone: theirs was ours
            loopback = interface_bytes(read_text(f"{self.proc}/self/net/dev"), (LOOPBACK,)).get(LOOPBACK)
        run_cpus: set[int] = set()
        for pid in self.ranks & set(table):
            try:
                run_cpus |= os.sched_getaffinity(pid)
            except OSError:
                pass
        snapshot = Snapshot(
            now,
            busy,
            steal,
            own_ticks + self._outside_total,
            me.ticks if me else 0,
            foreign,
            own,
            stopped,
            some,
            full,
            swapped_pages(read_text(f"{self.proc}/vmstat")),
            net,
            sorted(run_cpus),
            io_some,
            io_full,
            io,
            loopback,
            cgroup[1] if cgroup else None,
            cgroup_usec(self.cgroup_root, cgroup) if cgroup else None,
            self._job_has_self,
        )
        self.snapshots.append(snapshot)
        if self.gpus and (last or now - self._gpu_read_at >= gpu.GPU_INTERVAL_S):
            self._gpu_read_at = now
            reading, child_cpu_s = gpu.read(frozenset(own_pids))
            self.cost_cpu_s += child_cpu_s
            if reading is not None:
                self.gpu_readings.append(reading)
        return snapshot

    def kept_total(self, tree_total: int, reaped: float, table: dict[int, Process]) -> float:
        """All the CPU the keeper's tree used so far (a total: only its differences mean anything).
        The keeper alive: its tree's own + reaped ticks. Reaped by this process: the keeper's
        whole total arrived in our RUSAGE_CHILDREN; from the last look that saw it, the tree's
        total goes on as what we reaped since (which holds that look's tree and all after). A
        sampler of its own process (root: this process) counts its reaped children too."""
        if self.root_pid == self._self:
            return tree_total + reaped
        root = table.get(self.root_pid)
        if root is not None:
            self._root_seen = (reaped, tree_total, root.ppid == self._self)
            return tree_total
        if self._root_seen is None:
            return 0
        reaped_then, total_then, ours = self._root_seen
        return reaped - reaped_then if ours else total_then  # not our child: its last look's total

    def job_cgroup(self, own_pids: set[int]) -> tuple[str, str] | None:
        """The Slurm job's cgroup of this sampler (a node's sampler runs as a step of the run's
        job) or else of the run's ranks, looked up once per process."""
        if self._looked_for_job is None:
            self._looked_for_job = set()
            self._job = job_cgroup(read_text(f"{self.proc}/self/cgroup"))
            self._job_has_self = self._job is not None
        if self._job is None:
            for pid in sorted((self.ranks & own_pids) - self._looked_for_job):
                self._looked_for_job.add(pid)
                if (found := job_cgroup(read_text(f"{self.proc}/{pid}/cgroup"))) is not None:
                    self._job = found
                    break
        return self._job

    def others_io(
        self, foreign: dict[tuple[int, int], tuple[str, int]], table: dict[int, Process]
    ) -> dict[tuple[int, int], tuple[str, int]]:
        """Every other process's storage bytes: read where it ran, waited on I/O or is new since the
        last snapshot (all at the first), else carried from the last reading."""
        before = self.snapshots[-1].foreign if self.snapshots else None
        io = {}
        for key, (name, ticks) in foreign.items():
            known = self._io.get(key)
            if key in self._io_unreadable:
                continue
            moved = before is None or key not in before or before[key][1] != ticks
            if known is None or moved or table[key[0]].state == IO_WAIT_STATE:
                read = storage_bytes(read_text(f"{self.proc}/{key[0]}/io"))
                if read is None:
                    self._io_unreadable.add(key)
                    continue
                known = (name, read)
            io[key] = known
        self._io = io
        self._io_unreadable &= set(foreign)
        return dict(io)

    def cost(self) -> dict:
        """The sampler's own cost over the run: CPU seconds, and the share of one core it took."""
        span = (self.snapshots[-1].time_unix - self.snapshots[0].time_unix) if len(self.snapshots) > 1 else 0.0
        return {
            "interval_s": self.interval,
            **({"shortest_interval_s": SHORTEST_INTERVAL_S} if self.adaptive else {}),
            "snapshots": len(self.snapshots),
            **({"gpu_interval_s": gpu.GPU_INTERVAL_S, "gpu_readings": len(self.gpu_readings)} if self.gpus else {}),
            "cpu_seconds": round(self.cost_cpu_s, 4),
            "per_snapshot_ms": round(1000 * self.cost_cpu_s / len(self.snapshots), 3) if self.snapshots else None,
            "share_of_a_core": round(self.cost_cpu_s / span, 4) if span > 0 else None,
        }
