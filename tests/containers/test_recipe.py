"""The hpccm recipe: every (fabric, flavour) renders, parses, round-trips, carries its pins."""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from spython.main.parse.parsers import DockerParser, SingularityParser
from spython.main.parse.writers import DockerWriter, SingularityWriter

from containers import recipe, sources, stack
from containers.fabrics import FABRICS, profile
from launch.site import elf_versions

PAIRS = [(fabric, flavour) for fabric in FABRICS for flavour in stack.FLAVOURS]
STACKS = [("stack", flavour) for flavour in stack.FLAVOURS]
BASE = "/cache/base/bookworm/base.sif"


def _render(fabric: str, flavour: str, **kwargs) -> recipe.Recipe:
    return recipe.render(fabric, flavour, cpu_base=BASE, commit="abc123", **kwargs)


@pytest.fixture(scope="module")
def rendered():
    return {pair: _render(*pair) for pair in PAIRS + STACKS}


def parse(parser, text: str, tmp_path: Path, name: str) -> dict:
    path = tmp_path / name
    path.write_text(text)
    return parser(str(path)).recipe


def as_docker_bootstrap(definition: str) -> str:
    """spython's SingularityParser knows only `Bootstrap: docker`; the cpu flavour
    bootstraps from a local image, so parse it with that one header swapped."""
    return re.sub(r"BootStrap: localimage\nFrom: (\S+)", r"BootStrap: docker\nFrom: \1", definition)


ASSIGNMENT = re.compile(r"[A-Z_]+=\S*")


def install_steps(parsed: dict) -> list[tuple[str, str]]:
    """Every shell command of every stage, in order (spython's `install`), without
    bare VAR=value lines: spython turns Docker ENV into those, a .def keeps them in
    %environment."""
    steps = []
    for stage, rec in parsed.items():
        for block in rec.install:
            for command in re.split(r"\s*&&\s*|\n", block):
                command = command.strip().rstrip("\\").strip()
                if (
                    command
                    and command != "cd /"
                    and not command.startswith(("export ", "#"))
                    and not ASSIGNMENT.fullmatch(command)
                ):
                    steps.append((stage, command))
    return steps


def is_subsequence(needles: list, haystack: list) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def stages_of(pair) -> list[str]:
    fabric, flavour = pair
    if flavour == "cpu-debian":  # Debian's packaged stack: nothing to build
        return ["runtime"]
    if fabric == "stack":
        return ["devel", "runtime"]
    prof = profile(fabric)
    builds = prof.binds_host_libfabric or (flavour == "cuda" and "aws-ofi-nccl" in prof.source_builds)
    return ["devel", "runtime"] if builds else ["runtime"]


@pytest.mark.parametrize("pair", PAIRS + STACKS, ids=lambda p: "-".join(p))
def test_spython_parses_both_renderings(pair, rendered, tmp_path):
    r = rendered[pair]
    stages = stages_of(pair)
    docker = parse(DockerParser, r.dockerfile, tmp_path, "Dockerfile")
    apptainer = parse(SingularityParser, as_docker_bootstrap(r.definition), tmp_path, "image.def")
    assert list(docker) == stages and list(apptainer) == stages
    final = apptainer[stages[-1]]
    # spython turns %test into a /tests.sh written by install steps
    assert final.test == "/bin/bash /tests.sh" and any(recipe.IMAGE_TEST in s for s in final.install)
    fabric, flavour = pair
    if fabric == "stack":
        assert any(src == "bench" for src, *_ in (f.split() for f in final.files))
        if flavour == "cuda":
            assert docker["devel"].fromHeader.strip() == stack.CUDA_DEVEL_IMAGE
            assert docker["runtime"].fromHeader.strip() == stack.CUDA_RUNTIME_IMAGE
            # Apptainer: the devel stage is its own image, built from the devel base
            assert f"From: {stack.CUDA_DEVEL_IMAGE}" in r.devel_definition
            assert "BootStrap: localimage\nFrom: fabric-bench-stack-cuda-devel.sif" in r.definition
        else:
            assert docker["runtime"].fromHeader.strip() == stack.BASE_IMAGE_TAG
            assert f"BootStrap: localimage\nFrom: {BASE}" in r.definition
    else:  # a fabric image starts from its flavour's stack image
        assert docker["runtime"].fromHeader.strip() == recipe.stack_tag(flavour)
        assert f"BootStrap: localimage\nFrom: fabric-bench-stack-{flavour}.sif" in r.definition
        assert not any(src == "bench" for src, *_ in (f.split() for f in final.files))
    # the same build steps, whichever format: Dockerfile and .def(s) agree
    steps = install_steps(apptainer)
    if r.devel_definition:
        steps = (
            install_steps(parse(SingularityParser, as_docker_bootstrap(r.devel_definition), tmp_path, "devel.def"))
            + steps
        )
    assert is_subsequence(install_steps(docker), steps)
    if fabric == "stack":
        assert len(install_steps(docker)) > 10


@pytest.mark.parametrize("pair", PAIRS + STACKS, ids=lambda p: "-".join(p))
def test_dockerfile_to_def_to_dockerfile_keeps_every_install_step(pair, rendered, tmp_path):
    original = parse(DockerParser, rendered[pair].dockerfile, tmp_path, "Dockerfile")
    as_def = SingularityWriter(original).convert()
    back = parse(
        DockerParser,
        DockerWriter(parse(SingularityParser, as_def, tmp_path, "x.def")).convert(),
        tmp_path,
        "Dockerfile.back",
    )
    before, after = install_steps(original), install_steps(back)
    assert before == after, set(before) ^ set(after)


@pytest.mark.parametrize("pair", PAIRS + STACKS, ids=lambda p: "-".join(p))
def test_pinned_versions_and_labels(pair, rendered):
    fabric, flavour = pair
    r = rendered[pair]
    for name, version in stack.versions(flavour).items():
        assert f"org.fabric-bench.version.{name} {version}" in r.definition
        assert f"org.fabric-bench.version.{name}={version}" in r.dockerfile
    for text, sep in ((r.definition, " "), (r.dockerfile, "=")):
        assert f"org.fabric-bench.fabric{sep}{fabric}" in text
        assert f"org.fabric-bench.flavour{sep}{flavour}" in text
        assert f"org.fabric-bench.bundle-commit{sep}abc123" in text
        assert f"org.fabric-bench.recipe-hash{sep}{r.recipe_hash}" in text
        # a fabric image names the stack image it is built FROM by digest (filled in at build)
        assert (f"org.fabric-bench.stack-digest{sep}" in text) == (fabric != "stack")
    assert "\n%help\n" in r.definition and "\n%environment\n" in r.definition
    test_line = r.definition.split("\n%test\n")[1]
    assert f"torch={stack.python_versions()['torch']}" in test_line
    assert f"horovod={stack.HOROVOD_VERSION}" in test_line


def test_stack_digest_label_is_filled_at_build():
    r = recipe.render("efa", "cuda", commit="x").filled(STACK_DIGEST="f" * 64, STACK_IMAGE="/i/s.sif")
    assert f"org.fabric-bench.stack-digest {'f' * 64}" in r.definition
    assert "From: /i/s.sif" in r.definition and recipe.STACK_DIGEST not in r.definition
    # the hash names the recipe, not where the stack lives or what it digests to
    assert r.recipe_hash == recipe.render("efa", "cuda", commit="x").recipe_hash


def test_cuda_stack_builds_the_pinned_stack_from_source(rendered):
    text = rendered[("stack", "cuda")].dockerfile
    for name in ("rdma-core", "gdrcopy", "ucx", "libfabric", "pmix", "openmpi", "libpsm2", "slurm-pmi2"):
        assert sources.source(name).site_url in text, name  # canonical URLs, kept for sites
    configure = next(line for line in text.splitlines() if "openmpi" in line and "./configure" in line)
    for flag in (
        "--with-ucx=",
        "--with-ofi=",
        "--with-pmix=",
        "--with-slurm",
        "--with-pmi=",
        "--with-cuda",
        # psm2 MTL (omnipath preset) needs libpsm2 at Open MPI's configure: it is in the stack
        "--with-psm2=/usr/local/libpsm2",
        # external PMIx needs Open MPI on the same external hwloc and libevent
        "--with-hwloc=/usr",
        "--with-libevent=/usr",
    ):
        assert flag in configure, flag
    assert text.index("opa-psm2") < text.index("openmpi-")
    assert "libhwloc-dev" in text and "libevent-dev" in text
    # rdma-core reads its providers from /etc/libibverbs.d (what the presets bind), shipped to runtime
    assert "-DCMAKE_INSTALL_SYSCONFDIR=/etc" in text
    assert "COPY --from=devel /etc/libibverbs.d /etc/libibverbs.d" in text
    # libpsm2 without PSM_CUDA (needs CUDA hfi1 driver headers); headers where --with-psm2 looks
    assert "PSM_CUDA" not in text and "ln -sfn usr/include /usr/local/libpsm2/include" in text
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in text and "nvidia/nccl" in text
    assert "COPY --from=devel /opt/fabric-bench/venv" in text


# the configure/cmake options that switch CUDA (and gdrcopy, which needs CUDA) on or off
CUDA_OPTION = re.compile(r"^--(with|without|enable|disable)-(cuda|gdrcopy)(-dlopen)?(=.*)?$|^--with-cuda=")


def build_steps(dockerfile: str) -> dict[str, list[str]]:
    """Per source component (by its canonical URL): its configure/cmake/make command lines,
    CUDA options left out, in order."""
    steps: dict[str, list[str]] = {}
    current = ""
    for line in dockerfile.splitlines():
        for src in sources.SOURCES:
            if f"wget -q -nc -P /var/tmp {src.site_url}" in line:
                current = src.component
        if current and re.search(r"\./configure|cmake -D|make -j|make install|postconfigure|printf ", line):
            words = [w for w in line.replace("&&", " ").split() if not CUDA_OPTION.match(w)]
            steps.setdefault(current, []).append(" ".join(words))
    return steps


def test_cpu_stack_builds_the_cuda_stack_with_cuda_off(rendered):
    """Item 3 of the site-images issue: the cpu flavour builds the same components at the
    same versions with the same blocks and flags; only the CUDA options differ. Issue 49's
    exceptions: cuda's UCX is 1.22.0 built multi-threaded (a CUDA-aware Open MPI under Horovod),
    without its GPU-initiated side (DOCA headers a git source tree lacks), where cpu keeps bookworm's 1.13.1, cuda's Open MPI leaves out the uct BTL, and nccl-tests is
    cuda's only."""
    cpu, cuda = (build_steps(rendered[("stack", flavour)].dockerfile) for flavour in ("cpu", "cuda"))
    assert set(cpu) == {"rdma-core", "ucx-cpu", "libfabric", "pmix", "openmpi", "libpsm2", "slurm-pmi2"}
    assert set(cuda) - {"gdrcopy"} == (set(cpu) - {"ucx-cpu"}) | {"ucx", "nccl-tests"}
    new, old = stack.UCX.version, stack.UCX_CPU.version
    assert cpu["ucx-cpu"] == [
        line.replace(f"ucx-{new}", f"ucx-{old}")
        .replace(" --enable-mt", "")
        .replace(" --without-gda", "")
        .replace(" NVCC=/bin/false", "")
        for line in cuda["ucx"]
    ]
    assert cpu["openmpi"] == [line.replace(" --enable-mca-no-build=btl-uct", "") for line in cuda["openmpi"]]
    for component, lines in cpu.items():
        if component not in ("ucx-cpu", "openmpi"):
            assert lines == cuda[component], component
    text = rendered[("stack", "cpu")].dockerfile
    assert "--without-cuda" in text and "--with-cuda=" not in text
    assert "--with-gdrcopy" not in text and sources.source("gdrcopy").site_url not in text
    assert not re.search(r"openmpi-bin|libopenmpi|ucx-utils|libfabric-bin|libfabric1", text)


def test_cpu_installs_only_from_the_local_wheelhouse(rendered):
    text = rendered[("stack", "cpu")].dockerfile
    pip_lines = [line for line in text.splitlines() if "pip install" in line]
    assert len(pip_lines) == 3 and all("--no-index" in line for line in pip_lines)
    assert f"{stack.WHEELHOUSE}/horovod-{stack.HOROVOD_VERSION}-*.whl" in text


def fabric_layers(text: str) -> list[str]:
    return re.findall(rf"# {re.escape(recipe.FABRIC_BEGIN)}.*?# {re.escape(recipe.FABRIC_END)}", text, flags=re.S)


def outside_layers(text: str) -> str:
    """A fabric image's text without its fabric layers, labels, %help, %test and header."""
    text = re.sub(
        rf"# {re.escape(recipe.FABRIC_BEGIN)}.*?# {re.escape(recipe.FABRIC_END)}[^\n]*\n", "", text, flags=re.S
    )
    text = text.split("\n%help\n")[0]
    return "\n".join(
        line
        for line in text.splitlines()
        if not re.search(r"org\.fabric-bench\.|^# fabric-bench image:|^(%labels|LABEL)", line)
    )


@pytest.mark.parametrize("flavour", stack.FLAVOURS)
@pytest.mark.parametrize("fabric", [f for f in FABRICS if f != "ethernet"])
def test_fabric_images_are_the_stack_plus_their_fabric_layer(fabric, flavour, rendered):
    ours, ethernet = rendered[(fabric, flavour)], rendered[("ethernet", flavour)]
    for a, b in ((ours.definition, ethernet.definition), (ours.dockerfile, ethernet.dockerfile)):
        assert fabric_layers(a) != fabric_layers(b)
    # nothing but base lines outside the fabric layer (a build stage is a layer too)
    for text in (ours.definition, ours.dockerfile):
        rest = [line.strip() for line in outside_layers(text).splitlines() if line.strip()]
        # ... and the image's own copy of its self-test script
        rest = [
            line
            for line in rest
            if not re.match(r"(%files|COPY )?\s*containers/image-test.sh ", line) and line != "%files"
        ]
        assert all(re.match(r"(BootStrap:|From:|Stage:|FROM |# NOTE|# Singularity 3)", line) for line in rest), rest

    # the stack's labels (versions) are the same for every fabric image of the flavour
    def versions(text: str) -> list[str]:
        return sorted(line for line in text.splitlines() if "org.fabric-bench.version." in line)

    assert versions(ours.definition) == versions(ethernet.definition)


def test_fabric_layers_hold_the_fabric_packages(rendered):
    ib = fabric_layers(rendered[("infiniband", "cpu")].definition)[0]
    assert "ibverbs-utils" in ib and "perftest" in ib
    # the providers are the stack's rdma-core (/usr/local/rdma-core), in both flavours
    assert "ibverbs-providers" not in ib
    efa = fabric_layers(rendered[("efa", "cuda")].dockerfile)
    assert sources.source("aws-ofi-nccl").site_url in efa[0] and "--enable-platform-aws" in efa[0]
    assert "COPY --from=devel /usr/local/aws-ofi-nccl" in efa[1]
    sling = fabric_layers(rendered[("slingshot", "cpu")].dockerfile)[-1]
    assert "LD_LIBRARY_PATH=/opt/host/libfabric:/opt/host/libcxi:$LD_LIBRARY_PATH" in sling
    # the host's cxi libfabric needs libjson-c and libcurl, which the stack lacks
    sling_cuda = fabric_layers(rendered[("slingshot", "cuda")].dockerfile)[-1]
    assert "libjson-c5" in sling_cuda and "libcurl4" in sling_cuda


@pytest.mark.parametrize("flavour", recipe.SOURCE_STACKS)
def test_slingshot_links_the_stack_libfabric_users_against_the_oldest_host_abi(flavour, rendered):
    """The host's libfabric (SHS 12: 1.20-1.22, up to FABRIC_1.7) replaces the stack's 2.1, whose
    users need FABRIC_1.8: the layer rebuilds Open MPI against the distribution's libfabric-dev."""
    build, run = fabric_layers(rendered[("slingshot", flavour)].dockerfile)
    ompi = build_steps(rendered[("stack", flavour)].dockerfile)["openmpi"]
    rebuild = build_steps(build)["openmpi"]
    # the stack's own block and flags, --with-ofi found on the default paths (libfabric-dev's)
    assert "--with-ofi=/usr/local/libfabric" in ompi[0] and "--with-ofi " in rebuild[0]
    assert [step.replace("--with-ofi ", "--with-ofi=/usr/local/libfabric ") for step in rebuild] == ompi
    assert (
        build.index(recipe.HOST_ABI_PACKAGES[0])
        < build.index("rm -rf /usr/local/openmpi")
        < build.index("openmpi-4.1.4.tar.bz2")
        < build.index(f"mkdir -p {recipe.HOST_ABI_STAGE}")
    )
    # every libfabric user of the stack's Open MPI goes; the rebuilt ones come
    assert f"COPY --from=devel {recipe.HOST_ABI_STAGE} {recipe.HOST_ABI_STAGE}" in run
    assert run.index("rm -f") < run.index(f"cp -a {recipe.HOST_ABI_STAGE}/. /")
    assert f"fi-abi:{recipe.HOST_ABI_NODE}" in rendered[("slingshot", flavour)].definition
    assert "cp /usr/bin/fi_info" in build  # the distribution's fi_info, of the same ABI
    if flavour == "cuda":  # issue 49: the plugin against libfabric 1.20's headers and ABI, not 1.17's
        assert f"--with-libfabric={recipe.LIBFABRIC_SHS_PREFIX}" in build and "--disable-platform-aws" in build
        assert build.index(stack.LIBFABRIC_SHS.url) < build.index(sources.source("aws-ofi-nccl").site_url)
        assert f"COPY --from=devel {recipe.LIBFABRIC_SHS_PREFIX}" not in run  # the host's replaces it
        # a rehearsal, which cannot fetch it, builds the plugin against the distribution's 1.17
        local = recipe.render("slingshot", "cuda", base="local", commit="x", omit=sources.omitted()).dockerfile
        assert "--with-libfabric" not in fabric_layers(local)[0] and stack.LIBFABRIC_SHS.url not in local
    for other in (f for f in FABRICS if not profile(f).binds_host_libfabric):
        text = rendered[(other, flavour)].definition
        assert recipe.HOST_ABI_PACKAGES[0] not in text and "fi-abi" not in text


def test_cpu_debian_slingshot_checks_the_abi_of_debians_open_mpi(rendered):
    text = rendered[("slingshot", "cpu-debian")].definition
    assert f"fi-abi:{recipe.HOST_ABI_NODE}" in text and recipe.HOST_ABI_STAGE not in text


def test_the_host_abi_node_is_the_newest_of_the_distribution_libfabric():
    """HOST_ABI_NODE names what Debian 12's libfabric1 (1.17.0, the libfabric-dev the layer
    links against) defines: read from the library itself."""
    library = Path("/usr/lib/x86_64-linux-gnu/libfabric.so.1")
    if not library.exists():
        pytest.skip("Debian's libfabric1 is not installed (make setup-test installs it)")
    nodes = sorted(
        (v for v in elf_versions.defined(library.read_bytes()) if v.startswith("FABRIC_")), key=elf_versions.version_key
    )
    assert nodes[-1] == recipe.HOST_ABI_NODE


@pytest.mark.parametrize("newest, passes", [("FABRIC_1.6", True), ("FABRIC_1.2", False)])
def test_image_test_fi_abi_reads_what_open_mpis_libfabric_users_need(newest, passes):
    """The %test check on the host's Debian Open MPI (linked against libfabric 1.17: mtl/btl ofi
    need FABRIC_1.3, libmca_common_ofi FABRIC_1.5). A version check that must fail follows it,
    so the script stops there either way."""
    if shutil.which("ompi_info") is None:
        pytest.skip("Debian's Open MPI is not installed (make setup-test installs it)")
    script = stack.REPO / "containers" / "image-test.sh"
    done = subprocess.run(
        ["sh", str(script), f"fi-abi:{newest}", "openmpi=0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    if passes:
        assert re.search(
            rf"ok: fi-abi: [1-9]\d* libfabric users \(fi_info, under \S+\) need at most {newest}", done.stdout
        )
        assert "FAIL: openmpi: want 0" in done.stderr
    else:
        assert f"more than {newest}" in done.stderr and "mca_mtl_ofi.so:FABRIC_1.3" in done.stderr
        assert "ok: fi-abi" not in done.stdout


def test_recipe_hash_is_stable_and_names_the_content():
    a = recipe.render("efa", "cuda", commit="x")
    assert a.recipe_hash == recipe.render("efa", "cuda", commit="x").recipe_hash
    assert a.recipe_hash != recipe.render("infiniband", "cuda", commit="x").recipe_hash
    assert a.recipe_hash != recipe.render("efa", "cuda", base="local", commit="x").recipe_hash
    assert len(a.recipe_hash) == 64 and recipe.HASH_PLACEHOLDER not in a.definition + a.dockerfile


@pytest.mark.parametrize(
    "bad, message", [(("myrinet", "cpu"), "unknown fabric 'myrinet'"), (("efa", "gpu"), "unknown flavour 'gpu'")]
)
def test_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        recipe.render(*bad)
    with pytest.raises(ValueError, match="unknown base 'ngc'"):
        recipe.render("efa", "cuda", base="ngc")


def test_recipe_hash_ignores_the_commit_label():
    a, b = recipe.render("ethernet", "cpu", commit="aaa"), recipe.render("ethernet", "cpu", commit="bbb")
    assert a.recipe_hash == b.recipe_hash and a.definition != b.definition


# The local base (rehearsals here) ---------------------------------------------
# base lines: what hpccm's baseimage primitive renders (a docker bootstrap also sources the
# image's Docker environment in a %post of its own)
BASE_LINE = re.compile(r"^(BootStrap: |From: |FROM |%post$|    \. /\.singularity\.d/env/10-docker\*\.sh$)")
# what the base brings with it: its name and its python (Ubuntu 24.04's 3.12, bookworm's 3.11)
BASE_CARRIED = re.compile(
    r"org\.fabric-bench\.(version\.(base|python)|recipe-hash)[ =]|"
    r"fabric-bench-image-test .*python=|^    Stack: "
)


def changed_lines(a: str, b: str) -> list[str]:
    diff = difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("fabric", ["stack", *FABRICS])
def test_local_recipe_differs_from_the_site_recipe_only_in_its_base_lines(fabric):
    site = recipe.render(fabric, "cuda", commit="x")
    local = recipe.render(fabric, "cuda", base="local", commit="x")
    for a, b in (
        (site.definition, local.definition),
        (site.devel_definition, local.devel_definition),
        (site.dockerfile, local.dockerfile),
    ):
        changed = changed_lines(a, b)
        others = [line for line in changed if not (BASE_LINE.match(line[1:]) or BASE_CARRIED.search(line[1:]))]
        assert others == [], others
    if fabric == "stack":
        changed = changed_lines(site.definition, local.definition) + changed_lines(
            site.devel_definition, local.devel_definition
        )
        assert f"-From: {stack.CUDA_RUNTIME_IMAGE}" in changed and "+From: cuda-runtime.sif" in changed
        assert f"-From: {stack.CUDA_DEVEL_IMAGE}" in changed and "+From: cuda-devel.sif" in changed
        assert "-BootStrap: docker" in changed and "+BootStrap: localimage" in changed


def test_the_rehearsal_builds_what_sites_build():
    """Issue 38: gdrcopy and aws-ofi-nccl come from the pinned shared trees (issue 49: UCX 1.22 and
    nccl-tests too): the rehearsal's stack recipe is the site's but for its base lines and the
    label naming what no source here serves (the Slingshot plugin's libfabric 1.20)."""
    assert sources.omitted() == ("libfabric-shs",)
    rehearsal = recipe.render("stack", "cuda", base="local", commit="x", omit=sources.omitted())
    assert sources.source("gdrcopy").site_url in rehearsal.devel_definition
    assert "--with-gdrcopy=/usr/local/gdrcopy" in rehearsal.devel_definition
    for name in ("ucx", "nccl-tests"):
        assert sources.source(name).site_url in rehearsal.devel_definition
    assert "org.fabric-bench.omitted libfabric-shs" in rehearsal.definition
    for fabric in ("efa", "slingshot"):
        image = recipe.render(fabric, "cuda", base="local", commit="x", omit=sources.omitted()).definition
        assert sources.source("aws-ofi-nccl").site_url in image
        assert "export NCCL_NET_PLUGIN=ofi" in image and " nccl-net:OFI" in image


def test_what_a_rehearsal_cannot_fetch_is_left_out_and_labelled():
    """The machinery stays for a component without a reachable source."""
    omit = ("aws-ofi-nccl", "gdrcopy")
    rehearsal = recipe.render("stack", "cuda", base="local", commit="x", omit=omit)
    build_part = rehearsal.devel_definition.split("%labels")[0]
    assert "gdrcopy" not in build_part.replace("--without-gdrcopy", "")
    assert "org.fabric-bench.omitted aws-ofi-nccl,gdrcopy" in rehearsal.definition
    efa = recipe.render("efa", "cuda", base="local", commit="x", omit=omit)
    assert "aws-ofi-nccl" not in efa.definition.split("%help")[0].replace("omitted aws-ofi-nccl", "")
    assert "nccl-net:OFI" not in efa.definition


@pytest.mark.parametrize(
    "fabric, wanted",
    [
        (
            "ethernet",
            [
                "ompi:pml:ob1",
                "ompi:btl:self",
                "ompi:btl:vader",
                "ompi:btl:tcp",
                "fi:tcp",
                "ucx:tcp",
                "ucx:sm",
                "ucx:self",
                "nccl-net:Socket",
            ],
        ),
        (
            "infiniband",
            ["ompi:pml:ucx", "ompi:osc:ucx", "ucx:rc", "ucx:ud", "ucx:cuda_copy", "ucx:gdr_copy", "nccl-net:IB"],
        ),
        ("omnipath", ["ompi:pml:cm", "ompi:mtl:psm2", "fi:psm2"]),
        ("efa", ["ompi:pml:cm", "ompi:mtl:ofi", "fi:efa", "nccl-net:OFI"]),
        ("slingshot", ["ompi:pml:cm", "ompi:mtl:ofi", "nccl-net:OFI"]),
    ],
)
def test_every_component_a_preset_selects_is_checked_by_its_image_test(fabric, wanted):
    test_line = recipe.render(fabric, "cuda", commit="x").definition.split("\n%test\n")[1]
    for check in wanted:
        assert f" {check}" in test_line, check
    assert "ompi:btl:" not in test_line or fabric == "ethernet"  # "^openib,tcp" selects nothing
    assert "fi:cxi" not in test_line  # the host's provider (Slingshot binds it)


def test_a_recipe_renders_the_same_whatever_was_rendered_before():
    """hpccm's blocks render for the distribution of the last base image made: a stack whose
    blocks came before its base once rendered differently after a cuda render (and missed
    the build cache)."""
    from hpccm.primitives import baseimage

    hashes = []
    for distro in ("ubuntu16", "rockylinux8", "ubuntu24"):  # what an earlier render may leave
        rendered = {}
        for flavour in stack.FLAVOURS:
            for fabric in ("stack", "efa"):
                baseimage(image="earlier", _distro=distro)
                rendered[fabric, flavour] = recipe.render(fabric, flavour, commit="x").recipe_hash
        hashes.append(rendered)
    assert hashes[0] == hashes[1] == hashes[2]


def test_horovod_is_built_for_blackwell_too():
    """Issue 42, item 11: sm_100 (B200/GB200) beside sm_80 and sm_90, so B200 runs need no JIT; the
    wheel script's own default says the same."""
    assert stack.CUDA_ARCHS == ("80", "90", "100")
    devel = recipe.render_stack("cuda", commit="x").devel_definition
    assert "HOROVOD_BUILD_CUDA_CC_LIST=80,90,100 " in devel
    script = (stack.REPO / "containers/horovod/build-wheel.sh").read_text()
    assert "HOROVOD_BUILD_CUDA_CC_LIST:-80,90,100}" in script
