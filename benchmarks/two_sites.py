"""Two sites, end to end, on one machine: the identical benchmark on the identical stack, moved
through a real OCI registry, replayed on another fabric (root: network namespaces).

Site A and site B each have their own folder (site file, cache of digests and SBOMs, image
store, result store, signing key) and their own emulated cluster (`sitea`, `siteb`: 2 nodes as
network namespaces, links shaped to --rate-a and --rate-b). A shared registry (Debian's docker-registry on localhost) stands for
the registry two real sites share.

  A  builds (or reuses) the cpu-debian stack and ethernet images, pushes them and writes a
     signed reference file; runs a small study on its fabric (an emulated cluster, 2 nodes,
     --rate-a): DDP training and an MPI allreduce; archives and signs it.
  B  receives the archive, the reference file and A's public key (plain files: what an e-mail
     or a shared folder carries); pulls the image by digest and checks it against both
     (digest, stack digest, recipe hash, signatures); replays the archive with that image on
     its own fabric (--rate-b); compares in a report over A's runs and its replays, which says
     first that the stacks are identical (digest, SBOM) and the fabric is the difference, then
     the verdict (`fabric-bench compare` pairs runs of one fabric only: it is for a replay on
     the same fabric).

Every phase's seconds are printed; afterwards no registry process and no namespace of either
site is left (checked by pid and by name).

    python benchmarks/two_sites.py [--small] [--rate-a 1gbit --rate-b 5gbit] [--work DIR] [--benchmarks train,allreduce]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TypedDict

REPO = Path(__file__).resolve().parents[1]
FABRIC_BENCH = str(Path(sys.executable).parent / "fabric-bench")
sys.path.insert(0, str(REPO))

from benchmarks.phases import Phases  # noqa: E402
from containers import local_registry  # noqa: E402
from launch.fleet import emulate  # noqa: E402

phase = Phases()  # every phase's seconds, printed at the end
BENCHMARKS = ("train", "allreduce")  # the study's, in the order A runs them


class Site(TypedDict):
    """One site's name, folders and files (make_site)."""

    name: str
    dir: Path
    cache: Path
    store: Path
    images: Path
    results: Path
    key: Path
    references: Path
    allowed: Path
    site_file: Path
    cluster: str


def fb(site: Site, *args: str, ok: tuple[int, ...] = (0,)) -> str:
    """fabric-bench as one site runs it: its own cache and result store."""
    env = {**os.environ, "FABRIC_BENCH_CACHE": str(site["cache"]), "FABRIC_BENCH_STORE": str(site["store"])}
    out = subprocess.run([FABRIC_BENCH, *args], capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode not in ok:
        sys.exit(
            f"two_sites: fabric-bench {' '.join(args[:2])} failed ({out.returncode}):\n"
            f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return out.stdout


def last_json(text: str) -> dict:
    return json.loads(text[text.rindex("\n{") + 1 :] if "\n{" in text else text[text.index("{") :])


def make_site(root: Path, name: str, registry: str) -> Site:
    folder = root / name
    site: Site = {
        "name": name,
        "dir": folder,
        "cache": folder / "cache",
        "store": folder / "results.sqlite",
        "images": folder / "images",
        "results": folder / "results",
        "key": folder / f"{name}.key",
        "references": folder / "images.json",
        "allowed": folder / "allowed_signers",
        "site_file": folder / "site.toml",
        "cluster": name.replace("-", ""),
    }
    for made in (site["cache"], site["images"]):
        made.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(site["key"])], check=True)
    site["site_file"].write_text(
        f'runtime = "apptainer"\n\n[registry]\nurl = "{registry}/fabric-bench"\n'
        f'references = "{site["references"]}"\nallowed_signers = "{site["allowed"]}"\ninsecure = true\n'
    )
    return site


def study(args: argparse.Namespace) -> list[list[str]]:
    common = ["--launcher", "emulated", "--nodes", "2", "--ranks-per-node", "1", "--runtime", "apptainer"]
    iters = ["--warmup", "1", "--iters", "3" if args.small else "5"]
    budget = ["--max-seconds-per-size", "1"] if args.small else []  # each size measured for at most 1 s
    train = [
        "--benchmark",
        "train",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--batches-per-iter",
        "2",
        *iters,
    ]
    allreduce = [
        "--benchmark",
        "allreduce",
        "--backend",
        "mpi",
        "--min-bytes",
        "1048576",
        "--max-bytes",
        str((4 if args.small else 16) * 2**20),
        *iters,
        *budget,
    ]
    chosen = {"train": common + train, "allreduce": common + allreduce}
    return [chosen[name] for name in args.benchmarks.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="CI size: fewer iterations, smaller messages")
    parser.add_argument("--rate-a", default="1g", help="site A's emulated Ethernet (emu-eth-<rate>)")
    parser.add_argument("--rate-b", default="5g", help="site B's emulated Ethernet")
    parser.add_argument("--work", type=Path, help="keep both sites' folders here (default: a temporary one)")
    parser.add_argument(
        "--benchmarks",
        default=",".join(BENCHMARKS),
        help="the study's benchmarks, a comma list (default: both, DDP training and the MPI allreduce)",
    )
    args = parser.parse_args()
    if any(name not in BENCHMARKS for name in args.benchmarks.split(",")):
        print(f"two_sites: --benchmarks is a comma list of {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    if os.geteuid() != 0 or shutil.which("tc") is None:
        print("two_sites: needs root and tc (emulated clusters are network namespaces)", file=sys.stderr)
        return 2
    if not local_registry.available():
        print("two_sites: docker-registry not installed (apt-get install docker-registry)", file=sys.stderr)
        return 2
    fabric_a, fabric_b = f"emu-eth-{args.rate_a}", f"emu-eth-{args.rate_b}"
    # a stopped rehearsal (SIGTERM) still tears down: registry, clusters, its temporary folder
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    clusters: list[str] = []
    if any(emulate.cluster_of(ns) in ("sitea", "siteb") for ns in emulate.namespaces()):
        print("two_sites: clusters sitea/siteb exist already (fabric-bench emulate down sitea siteb)", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="fabric-bench-two-sites."))
    registry = local_registry.LocalRegistry(work / "registry")
    try:
        with phase("shared registry up"):
            registry.start()
            print(f"   docker-registry pid {registry.pid} on {registry.address}")
        a = make_site(work, "site-a", registry.address)
        b = make_site(work, "site-b", registry.address)
        a["cache"] = Path(os.environ.get("FABRIC_BENCH_CACHE") or Path.home() / ".cache/fabric-bench")  # A builds
        with phase("A: build the images (cached by their inputs)"):
            built = last_json(fb(a, "image", "build", "--fabric", "ethernet", "--flavour", "cpu-debian"))
            print(f"   {built['image']}\n   stack {built['stack_digest'][:16]}…")
        with phase("A: push and sign the references"):
            pushed = {}
            # the small version pushes the fabric image alone (a whole image: B runs it); its label
            # and SBOM name the stack it was built FROM
            images = [("ethernet-cpu-debian", built["image"])]
            if not args.small:
                images.insert(0, ("stack-cpu-debian", built["stack_image"]))
            for name, image in images:
                pushed[name] = last_json(
                    fb(
                        a,
                        "image",
                        "push",
                        image,
                        "--site",
                        str(a["site_file"]),
                        "--to",
                        f"{registry.address}/fabric-bench/{name}:v1",
                        "--sign-key",
                        str(a["key"]),
                    )
                )
                print(f"   {pushed[name]['reference']}")
        with phase("A and B: each site's emulated cluster up (2 nodes)"):
            for site, rate in ((a, args.rate_a), (b, args.rate_b)):
                fb(site, "emulate", "up", "--nodes", "2", "--link-rate", rate, "--name", site["cluster"])
                clusters.append(site["cluster"])
        with phase(f"A: run the study on {fabric_a}"):
            for argv in study(args):
                fb(a, "run", *argv, "--fabric", fabric_a, "--image", built["image"], "--results", str(a["results"]))
        archive = a["dir"] / "study-a.tar.gz"
        with phase("A: archive and sign"):
            fb(
                a,
                "archive",
                str(a["results"]),
                "--output",
                str(archive),
                "--sign-key",
                str(a["key"]),
                "--site",
                str(a["site_file"]),
                "--system-name",
                "site-a",
            )
        with phase("A -> B: the archive, the reference file and A's public key"):
            shutil.copy(archive, b["dir"] / archive.name)
            shutil.copy(a["references"], b["dir"] / "images-from-a.json")
            shutil.copy(str(a["references"]) + ".sig", str(b["dir"] / "images-from-a.json") + ".sig")
            b["allowed"].write_text(f"site-a {Path(str(a['key']) + '.pub').read_text()}")
            archive = b["dir"] / archive.name
        with phase("B: pull by digest and verify (image, references, archive)"):
            pulled = last_json(
                fb(
                    b,
                    "image",
                    "pull",
                    pushed["ethernet-cpu-debian"]["reference"],
                    "--out",
                    str(b["images"] / "ethernet-cpu-debian.sif"),
                    "--reference-file",
                    str(b["dir"] / "images-from-a.json"),
                    "--archive",
                    str(archive),
                    "--allowed-signers",
                    str(b["allowed"]),
                    "--insecure",
                )
            )
            assert pulled["image_digest"] == pushed["ethernet-cpu-debian"]["image_digest"]
            print(
                f"   {pulled['image']}: {pulled['image_digest'][:23]}… checked against "
                f"{', '.join(pulled['checked_against'])}"
            )
        with phase(f"B: replay the archive on {fabric_b}"):
            fb(
                b,
                "replay",
                str(archive),
                "--results",
                str(b["results"]),
                "--image",
                pulled["image"],
                "--fabric",
                fabric_b,
                "--allowed-signers",
                str(b["allowed"]),
                "--require-signed",
            )
        with phase("B: report (A's runs and B's replays: the fabric verdict)"):
            extracted = b["dir"] / "from-a"
            _extract(archive, extracted)
            report = fb(
                b,
                "report",
                str(extracted / "results"),
                str(b["results"]),
                "--output",
                str(b["dir"] / "report"),
                "--baseline-fabric",
                fabric_a,
            )
            print("   report at B:")
            print("\n".join("     " + line for line in report.splitlines() if line.startswith(("stack:", "verdict"))))
    finally:
        with phase("teardown"):
            registry.stop()
            for name in clusters:
                emulate.down(name)
            left = [ns for ns in emulate.namespaces() if emulate.cluster_of(ns) in ("sitea", "siteb")]
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
                print(f"   work folder {work} removed")
    alive = registry.proc is not None and registry.proc.poll() is None
    print(
        f"afterwards: registry pid {registry.pid} {'STILL RUNNING' if alive else 'gone'}; "
        f"new namespaces left: {left or 'none'}"
    )
    phase.print_table()
    return 1 if alive or left else 0


def _extract(archive: Path, target: Path) -> None:
    """A's results out of the verified archive (launch.provenance.archive: member paths checked)."""
    from launch.provenance import archive as archives

    archives.extract(archives.read(archive), target)


if __name__ == "__main__":
    sys.exit(main())
