"""An emulated cluster under real Slurm (issue 31): its figures. Root and slurm-wlm required.

1. Allreduce busbw at one large message, 2 nodes, under Slurm (srun --mpi=pmix across
   the namespaces of `emulate up --slurm`) against the bundle's own emulated launcher
   (mpirun through its namespace agent) on the same link rate, in alternating rounds:
   each one's busbw / link rate, and Slurm / emulated per round.
2. `fabric-bench locate` on a larger cluster (default 6 nodes): a healthy cluster, a
   planted bad link the screen pattern measures and one it does not, a planted slow node;
   each with both patterns: what it named, its rounds, steps, seconds.

    python benchmarks/emulated_slurm.py [--rate 300mbit] [--rounds 3] [--nodes 6] [--bytes 16777216]
                                        [--skip-allreduce] [--skip-locate] [--patterns all-pairs,screen]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from launch.fleet import emulate
from launch.fleet.emulate import slurm_nodes
from launch.results.result import read as read_result

FB = [str(Path(sys.executable).parent / "fabric-bench")]


def fb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([*FB, *args], capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        print(f"  `fabric-bench {' '.join(args)}` failed: {proc.stderr.strip()[-500:]}", flush=True)
    return proc


def busbw(results: Path) -> float | None:
    found = sorted(results.glob("*/result.json"))
    if not found:
        return None
    r = read_result(found[-1])
    return r.sizes[-1]["busbw_gbit_s"] if r.ok and r.sizes else None


def allreduce_rounds(rate: str, rounds: int, nbytes: int, work: Path) -> None:
    link = emulate.parse_rate(rate) / 1e9
    size = [
        "--benchmark",
        "allreduce",
        "--min-bytes",
        str(nbytes),
        "--max-bytes",
        str(nbytes),
        "--iters",
        "3",
        "--warmup",
        "1",
        "--nodes",
        "2",
        "--ranks",
        "2",
        "--runtime",
        "host",
    ]
    assert fb("emulate", "up", "--nodes", "3", "--link", rate, "--slurm", "--name", "bench").returncode == 0
    try:
        env = slurm_nodes.client_env("bench")
        site = work / "site.toml"
        fb("site", "init", "--emulated", "bench", "-o", str(site), "--force", env=env)
        print(f"allreduce {nbytes} B, 2 nodes, link {rate}: busbw / link rate")
        print(f"{'round':>5} {'slurm':>8} {'emulated':>9} {'slurm/emulated':>15}")
        for k in range(rounds):
            order = ("slurm", "emulated") if k % 2 == 0 else ("emulated", "slurm")
            got = {}
            for kind in order:
                out = work / f"{kind}-{k}"
                if kind == "slurm":
                    fb("run", "--site", str(site), "--fabric", "ethernet", *size, "--results", str(out), env=env)
                else:
                    fb("run", "--launcher", "emulated", "--fabric", f"emu-eth-{rate}", *size, "--results", str(out))
                got[kind] = busbw(out)
            s, e = got["slurm"], got["emulated"]
            print(
                f"{k:>5} {s / link if s else float('nan'):8.3f} {e / link if e else float('nan'):9.3f} "
                f"{s / e if s and e else float('nan'):15.3f}",
                flush=True,
            )
    finally:
        fb("emulate", "down", "bench")


def locate_cases(nodes: int, rate: str, work: Path, patterns: list[str]) -> None:
    """Each planted case on one cluster, located with each pattern in turn (the order alternates
    from case to case)."""
    half = nodes // 2
    cases = {
        "healthy": [],
        f"bad link n1-n{1 + half}": ["--link", f"n1-n{1 + half}=75mbit"],
        "bad link n1-n3": ["--link", "n1-n3=75mbit"],
        "slow node n2": ["--slow", "n2"],
    }
    print(
        f"\nlocate on {nodes} nodes, links {rate} (n1-n{1 + half}: a pair the screen measures; n1-n3: one it does not)"
    )
    for k, (label, planted) in enumerate(cases.items()):
        assert (
            fb(
                "emulate", "up", "--nodes", str(nodes), "--link", rate, *planted, "--slurm", "--name", "bench"
            ).returncode
            == 0
        )
        try:
            for pattern in patterns if k % 2 == 0 else patterns[::-1]:
                out = work / f"locate-{label.replace(' ', '-')}-{pattern}"
                fb(
                    "locate",
                    "--interface",
                    "fbemu0",
                    "--bytes",
                    str(2 * 2**20),
                    "--out",
                    str(out),
                    "--pattern",
                    pattern,
                    env=slurm_nodes.client_env("bench"),
                )
                data = json.loads((out / "locate.json").read_text())
                named = [f"node {n}" for n in data["slow_nodes"]] + [f"link {a}-{b}" for a, b in data["slow_links"]]
                print(
                    f"  {label:<16} {pattern:<9} named: {', '.join(named) or 'nothing':<14} rounds "
                    f"{data['rounds']:>2}  steps {data['steps']:>2}  {data['seconds']:4.0f} s  reference "
                    f"{data['test']['reference_gbit_s'] * 1000:.0f} Mbit/s",
                    flush=True,
                )
        finally:
            fb("emulate", "down", "bench")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", default="300mbit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--bytes", type=int, default=16 * 2**20)
    p.add_argument("--skip-allreduce", action="store_true")
    p.add_argument("--skip-locate", action="store_true")
    p.add_argument("--patterns", default="all-pairs,screen", help="locate's patterns to compare")
    args = p.parse_args()
    if not slurm_nodes.available():
        print("error: needs Slurm (apt-get install slurm-wlm)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="emulated-slurm-") as tmp:
        if not args.skip_allreduce:
            allreduce_rounds(args.rate, args.rounds, args.bytes, Path(tmp))
        if not args.skip_locate:
            locate_cases(args.nodes, args.rate, Path(tmp), args.patterns.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
