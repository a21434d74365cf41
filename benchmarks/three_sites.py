"""Three sites sharing results through a real OCI registry, on one machine, in one command: two
publish signed results, a third pulls, verifies and reports across them (docs/sharing.md).

Each site has its own folder (results, results store, cache, signing key); a registry (Debian's
docker-registry on localhost) stands for the one a community of sites shares. Small real runs on
this host (local launcher, no image, nothing built):

  A  runs a 2-rank MPI allreduce at 64 KiB six times (enough for a baseline: five clean runs
     before the newest) and a tiny 2-rank DDP training run; publishes them signed.
  B  runs the same allreduce once, and the training run from a copy of the bundle without git
     metadata (as a release tarball would be: its results record no bundle commit); publishes.
  R  a third publisher, whose key C has revoked, republishes A's results under its own name.
  T  A's archive with one result edited after signing (its manifest's checksums made to agree,
     A's signature kept) is pushed to the registry under A's name.
  C  trusts A, B and R's keys and has revoked R's; pulls A's and B's artifacts (verified,
     imported), reports across the sites, and opens the page in Chromium: the comparison table
     first (the allreduce of A and B side by side; the training named as not comparable, with
     why). R's and T's artifacts are each refused in one line.

Every phase's seconds are printed; afterwards no process this script started is left (checked by
pid: every process that carries this run's marker in its environment, the registry and Chromium).

    python benchmarks/three_sites.py [--work DIR] [--allreduce-runs N]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TypedDict

REPO = Path(__file__).resolve().parents[1]
FABRIC_BENCH = str(Path(sys.executable).parent / "fabric-bench")
sys.path.insert(0, str(REPO))

from benchmarks.phases import Phases  # noqa: E402
from containers import local_registry  # noqa: E402
from containers.files import sha256_bytes  # noqa: E402

phase = Phases()  # every phase's seconds, printed at the end
MARKER = "FABRIC_BENCH_THREE_SITES"  # in every process this script starts: found again by it afterwards
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-headless-shell")
ALLREDUCE = [
    *("--benchmark", "allreduce", "--backend", "mpi", "--ranks", "2", "--launcher", "local", "--runtime", "host"),
    *("--fabric", "ethernet", "--min-bytes", "65536", "--max-bytes", "65536", "--iters", "5", "--warmup", "1"),
]
TRAIN = [
    *("--benchmark", "train", "--engine", "ddp", "--model", "resnet18", "--ranks", "2", "--launcher", "local"),
    *("--runtime", "host", "--fabric", "ethernet", "--image-size", "32", "--batch-size", "4"),
    *("--batches-per-iter", "1", "--iters", "3", "--warmup", "1"),
]
A_ALLREDUCE_RUNS = 6  # a baseline needs 5 clean runs before the newest (launch.analysis.baseline)


class Site(TypedDict):
    name: str
    dir: Path
    results: Path
    store: Path
    cache: Path
    key: Path
    origins: str  # $FABRIC_BENCH_ORIGINS: the hosts whose runs are this site's own


def make_site(root: Path, name: str) -> Site:
    folder = root / name
    site: Site = {
        "name": name,
        "dir": folder,
        "results": folder / "results",
        "store": folder / "store" / "results.sqlite",
        "cache": folder / "cache",
        "key": folder / f"{name}.key",
        "origins": "*",
    }
    site["cache"].mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(site["key"])], check=True)
    return site


def public_key(site: Site) -> str:
    return Path(str(site["key"]) + ".pub").read_text().strip()


def fb(site: Site, *args: str, ok: tuple[int, ...] = (0,), bundle: Path | None = None) -> subprocess.CompletedProcess:
    """fabric-bench as one site runs it (its own store and cache); `bundle`: a copy of the bundle to run."""
    env = {
        **os.environ,
        "FABRIC_BENCH_STORE": str(site["store"]),
        "FABRIC_BENCH_CACHE": str(site["cache"]),
        "FABRIC_BENCH_ORIGINS": site["origins"],
    }
    argv = [FABRIC_BENCH, *args]
    if bundle is not None:
        env["PYTHONPATH"] = str(bundle)
        argv = [
            sys.executable,
            "-c",
            "import sys; from launch.cli.app import main; sys.argv[0] = 'fabric-bench'; main()",
        ]
        argv += list(args)
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=bundle or REPO, timeout=900)
    if out.returncode not in ok:
        sys.exit(
            f"three_sites: {site['name']}: fabric-bench {' '.join(args[:3])} exited {out.returncode}:\n"
            f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return out


def release_copy(target: Path) -> Path:
    """The bundle's code without its git metadata, as a release tarball unpacks."""
    for part in ("bench", "launch", "containers"):
        shutil.copytree(REPO / part, target / part, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def printed_reference(out: subprocess.CompletedProcess) -> str:
    return out.stdout.strip().splitlines()[-1]


def republish_as(archive: Path, new_site: str, key: Path, output: Path) -> Path:
    """R: the members of a verified archive under another site's name, signed with R's key."""
    from launch.provenance import archive as archives

    opened = archives.read(archive)
    members = dict(opened.members)
    (old,) = [name for name in members if name.startswith("systems/")]
    system = json.loads(members.pop(old))
    members[f"systems/{new_site}.json"] = json.dumps({**system, "system_name": new_site}, indent=2).encode()
    archives.write(members, output, key)
    return output


def tampered_copy(archive: Path, output: Path) -> tuple[Path, str]:
    """T: one result's bus bandwidth made 10x after signing; the manifest's checksums recomputed to
    agree, the original signature kept (what a forger without the key can do)."""
    from launch.provenance import archive as archives

    verified = archives.read(archive)
    members = dict(verified.members)
    name = next(n for n in sorted(members) if n.endswith("/result.json") and b'"busbw_gbit_s"' in members[n])
    text = members[name].decode()
    match = re.search(r'"busbw_gbit_s": ([0-9.e+-]+)', text)
    assert match is not None
    members[name] = (text[: match.start(1)] + repr(float(match.group(1)) * 10) + text[match.end(1) :]).encode()
    manifest = {
        **verified.manifest,
        "members": {n: {"sha256": sha256_bytes(d), "bytes": len(d)} for n, d in sorted(members.items())},
    }
    assert verified.signature is not None
    head = [
        (archives.MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode()),
        (archives.SIGNATURE, verified.signature),
    ]
    with tarfile.open(output, "w:gz") as tar:
        for member, data in [*head, *sorted(members.items())]:
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return output, name


def push_unchecked(archive: Path, target: str) -> str:
    """Push an archive as a results artifact the way `publish` does, without its signature check:
    what a forger with write access to the registry can do. Returns its pinned reference."""
    from launch.provenance import archive as archives
    from launch.sharing import publish, registry

    repository, _ = registry.at(target)
    return publish.push(repository, archive, archives.read(archive)).reference


def one_line_refusal(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    if out.returncode != 2 or len(lines) != 1:
        sys.exit(f"three_sites: expected a refusal in one line, exit 2; got {out.returncode}:\n{out.stderr[-2000:]}")
    return lines[0]


def open_in_chromium(page: Path, profile: Path) -> tuple[str, int]:
    """The page's DOM after Chromium loaded it (headless, offline), and the browser's pid."""
    if CHROMIUM is None:
        sys.exit("three_sites: chromium not installed (Debian package `chromium`)")
    argv = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--proxy-server=http://127.0.0.1:9",  # offline
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    browser = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        dom, _ = browser.communicate(timeout=120)
    finally:
        if browser.poll() is None:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
    return dom.decode("utf-8", "replace"), browser.pid


def left_behind(token: str) -> list[int]:
    """Pids of every process still running whose environment carries this run's marker."""
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == token and process.pid != os.getpid():
                found.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="keep the sites' folders here (default: a temporary one)")
    parser.add_argument(
        "--allreduce-runs",
        type=int,
        default=A_ALLREDUCE_RUNS,
        help=f"A's allreduce runs (default {A_ALLREDUCE_RUNS}: five clean runs before the newest make a baseline; "
        "with fewer, A's row says how far its baseline is)",
    )
    args = parser.parse_args()
    if args.allreduce_runs < 1:
        print("three_sites: --allreduce-runs must be >= 1", file=sys.stderr)
        return 2
    if not local_registry.available():
        print("three_sites: docker-registry not installed (apt-get install docker-registry)", file=sys.stderr)
        return 2
    if shutil.which("mpirun") is None:
        print("three_sites: Open MPI's mpirun not installed", file=sys.stderr)
        return 2
    work = (args.work or Path(tempfile.mkdtemp(prefix="fabric-bench-three-sites."))).resolve()
    if any((folder / ".git").exists() for folder in (work, *work.parents)):
        print(f"three_sites: {work} is inside a git checkout: B's release copy would find its commit", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    os.environ[MARKER] = token  # every process started from here on carries it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    registry = local_registry.LocalRegistry(work / "registry")
    browser_pid = 0
    try:
        with phase("shared registry up, three sites and a revoked publisher (folders, keys)"):
            registry.start()
            print(f"   docker-registry pid {registry.pid} on {registry.address}")
            a, b, c, r = (make_site(work, name) for name in ("site-a", "site-b", "site-c", "site-r"))
            # one machine stands for all: C names hosts of its own, or A's and B's results (written on
            # this host) would claim C's origin, which a pull refuses (launch.results.origins)
            c["origins"] = "site-c-login*"
            repository = f"{registry.address}/fabric-bench/results"
            allowed = c["dir"] / "sites.allowed"
            allowed.write_text("".join(f"{s['name']} {public_key(s)}\n" for s in (a, b, r)))
            revoked = c["dir"] / "revoked.keys"
            revoked.write_text(f"# site-r's key, revoked\n{public_key(r)}\n")
        runs = f"{args.allreduce_runs} allreduce run{'s' if args.allreduce_runs > 1 else ''}"
        with phase(f"A: {runs} (2 ranks, 64 KiB) and a tiny training run"):
            for _ in range(args.allreduce_runs):
                fb(a, "run", *ALLREDUCE, "--results", str(a["results"]))
            fb(a, "run", *TRAIN, "--results", str(a["results"]))
        with phase("B: one allreduce run; the training run from a release copy (no git metadata)"):
            fb(b, "run", *ALLREDUCE, "--results", str(b["results"]))
            copy = release_copy(b["dir"] / "bundle")
            fb(b, "run", *TRAIN, "--results", str(b["results"]), bundle=copy)
        kept = a["dir"] / "study-a.tar.gz"
        published = {}
        with phase("A and B: archive, sign and publish"):
            for site, extra in ((a, ["--keep-archive", str(kept)]), (b, [])):
                out = fb(
                    site,
                    "publish",
                    str(site["results"]),
                    repository,
                    "--sign-key",
                    str(site["key"]),
                    "--system-name",
                    site["name"],
                    *extra,
                )
                published[site["name"]] = printed_reference(out)
                print(f"   {out.stdout.strip().splitlines()[0]}")
        with phase("R (revoked key) republishes A's results; T pushes A's archive with a result edited"):
            r_archive = republish_as(kept, "site-r", r["key"], r["dir"] / "study-r.tar.gz")
            published["site-r"] = printed_reference(fb(r, "publish", str(r_archive), repository))
            forged, edited = tampered_copy(kept, work / "tampered.tar.gz")
            published["tampered"] = push_unchecked(forged, repository)
            print(f"   T edited {edited} (busbw x10) and pushed {published['tampered']}")

        def pull_by_digest(*references: str) -> list[str]:
            """C's `results pull` of the artifacts at `references` (REPO@sha256:...), against C's keys."""
            digests = [arg for reference in references for arg in ("--digest", reference.rsplit("@", 1)[1])]
            return [
                "results",
                "pull",
                repository,
                "--allowed-signers",
                str(allowed),
                "--revoked",
                str(revoked),
                *digests,
            ]

        with phase("C: list, pull A's and B's results (verified), import"):
            listed = fb(c, "results", "pull", repository, "--list", "--json")
            print(f"   the registry lists {len(json.loads(listed.stdout))} results artifacts")
            pulled = fb(c, *pull_by_digest(published["site-a"], published["site-b"]))
            print("\n".join(f"   {line}" for line in pulled.stdout.strip().splitlines()[-4:]))
        with phase("C: the revoked key's and the tampered artifact, each refused in one line"):
            for what in ("site-r", "tampered"):
                refused = fb(c, *pull_by_digest(published[what]), ok=(2,))
                print(f"   {what}: {one_line_refusal(refused)}")
        with phase("C: report across the sites"):
            report = fb(c, "report", "--pulled", "--output", str(c["dir"] / "report"))
            print("\n".join(f"   {line}" for line in report.stdout.splitlines() if line.startswith(("across", "  "))))
        with phase("C: the page in Chromium (headless, offline)"):
            dom, browser_pid = open_in_chromium(c["dir"] / "report" / "report.html", c["dir"] / "chromium")
            first_table, verdicts = dom.find("<table"), dom.find('class="verdict"')
            across = dom.find('id="across-sites"')
            first = (
                "the comparison table"
                if -1 < across < first_table and (verdicts == -1 or first_table < verdicts)
                else "NOT the comparison table"
            )
            print(f"   chromium pid {browser_pid}: the page opens with {first}")
            for apart in re.findall(r'<p class="not-compared">(.*?)</p>', dom):
                print(f"   page says: {apart}")
    finally:
        with phase("teardown"):
            registry.stop()
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
                print(f"   work folder {work} removed")
    import psutil

    registry_alive = psutil.pid_exists(registry.pid) and registry.proc is not None and registry.proc.poll() is None
    left = left_behind(token)
    print(
        f"afterwards: registry pid {registry.pid} {'STILL RUNNING' if registry_alive else 'gone'}; "
        f"chromium pid {browser_pid} {'STILL RUNNING' if browser_pid and psutil.pid_exists(browser_pid) else 'gone'}; "
        f"processes of this run left: {left or 'none'}"
    )
    phase.print_table()
    return 1 if registry_alive or left else 0


if __name__ == "__main__":
    sys.exit(main())
