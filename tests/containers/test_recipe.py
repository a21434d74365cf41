"""The hpccm recipe: every (fabric, flavour) renders, parses, round-trips, carries its pins."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from spython.main.parse.parsers import DockerParser, SingularityParser
from spython.main.parse.writers import DockerWriter, SingularityWriter

from containers import recipe, stack
from containers.fabrics import FABRICS

PAIRS = [(fabric, flavour) for fabric in FABRICS for flavour in stack.FLAVOURS]
BASE = "/cache/base/bookworm/base.sif"


@pytest.fixture(scope="module")
def rendered():
    return {pair: recipe.render(*pair, base=BASE, commit="abc123") for pair in PAIRS}


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
                if command and command != "cd /" and not command.startswith(("export ", "#")) \
                        and not ASSIGNMENT.fullmatch(command):
                    steps.append((stage, command))
    return steps


def is_subsequence(needles: list, haystack: list) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "-".join(p))
def test_spython_parses_both_renderings(pair, rendered, tmp_path):
    r = rendered[pair]
    stages = ["devel", "runtime"] if pair[1] == "cuda" else ["runtime"]
    docker = parse(DockerParser, r.dockerfile, tmp_path, "Dockerfile")
    apptainer = parse(SingularityParser, as_docker_bootstrap(r.definition), tmp_path, "image.def")
    assert list(docker) == stages and list(apptainer) == stages
    final = apptainer[stages[-1]]
    # spython turns %test into a /tests.sh written by install steps
    assert final.test == "/bin/bash /tests.sh" and any(recipe.IMAGE_TEST in s for s in final.install)
    assert any(src == "bench" for src, *_ in (f.split() for f in final.files))
    if pair[1] == "cuda":
        assert docker["devel"].fromHeader.strip() == stack.CUDA_DEVEL_IMAGE
        assert docker["runtime"].fromHeader.strip() == stack.CUDA_RUNTIME_IMAGE
    else:
        assert docker["runtime"].fromHeader.strip() == stack.BASE_IMAGE_TAG
        assert f"BootStrap: localimage\nFrom: {BASE}" in r.definition
    # the same build steps, whichever format: Dockerfile and .def agree
    assert len(install_steps(docker)) > 10
    assert is_subsequence(install_steps(docker), install_steps(apptainer))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "-".join(p))
def test_dockerfile_to_def_to_dockerfile_keeps_every_install_step(pair, rendered, tmp_path):
    original = parse(DockerParser, rendered[pair].dockerfile, tmp_path, "Dockerfile")
    as_def = SingularityWriter(original).convert()
    back = parse(DockerParser, DockerWriter(parse(SingularityParser, as_def, tmp_path, "x.def")).convert(),
                 tmp_path, "Dockerfile.back")
    before, after = install_steps(original), install_steps(back)
    assert len(before) > 10
    assert before == after, set(before) ^ set(after)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "-".join(p))
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
    assert "\n%help\n" in r.definition and "\n%environment\n" in r.definition
    test_line = r.definition.split("\n%test\n")[1]
    assert f"torch={stack.python_versions()['torch']}" in test_line
    assert f"horovod={stack.HOROVOD_VERSION}" in test_line


def test_cuda_builds_the_pinned_stack_from_source(rendered):
    text = rendered[("efa", "cuda")].dockerfile
    for url_part in (f"openmpi-{stack.OPENMPI.version}.tar.bz2", f"ucx-{stack.UCX.version}",
                     f"libfabric-{stack.LIBFABRIC.version}", f"pmix-{stack.PMIX.version}",
                     f"nccl/archive/v{stack.NCCL.version}", f"aws-ofi-nccl-{stack.AWS_OFI_NCCL.version}",
                     f"gdrcopy/archive/v{stack.GDRCOPY.version}", "rdma-core"):
        assert url_part in text, url_part
    configure = next(line for line in text.splitlines() if "openmpi" in line and "./configure" in line)
    for flag in ("--with-ucx=", "--with-ofi=", "--with-pmix=", "--with-slurm", "--with-pmi=", "--with-cuda"):
        assert flag in configure
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in text
    assert "COPY --from=devel /opt/fabric-bench/venv" in text


def test_cpu_installs_only_from_the_local_wheelhouse(rendered):
    text = rendered[("ethernet", "cpu")].dockerfile
    pip_lines = [line for line in text.splitlines() if "pip install" in line]
    assert len(pip_lines) == 3 and all("--no-index" in line for line in pip_lines)
    assert f"{stack.WHEELHOUSE}/horovod-{stack.HOROVOD_VERSION}-*.whl" in text


def common_part(text: str) -> str:
    """An image text without its fabric layers and the lines naming the fabric."""
    text = re.sub(rf"# {re.escape(recipe.FABRIC_BEGIN)}.*?# {re.escape(recipe.FABRIC_END)}[^\n]*\n",
                  "", text, flags=re.S)
    text = text.split("\n%help\n")[0]
    return "\n".join(line for line in text.splitlines()
                     if not re.search(r"org\.fabric-bench\.(fabric|recipe-hash)\b|^# fabric-bench image:", line))


def fabric_layers(text: str) -> list[str]:
    return re.findall(rf"# {re.escape(recipe.FABRIC_BEGIN)}.*?# {re.escape(recipe.FABRIC_END)}",
                      text, flags=re.S)


@pytest.mark.parametrize("flavour", stack.FLAVOURS)
@pytest.mark.parametrize("fabric", [f for f in FABRICS if f != "ethernet"])
def test_fabric_images_differ_only_in_fabric_layers(fabric, flavour, rendered):
    ours, ethernet = rendered[(fabric, flavour)], rendered[("ethernet", flavour)]
    for a, b in ((ours.definition, ethernet.definition), (ours.dockerfile, ethernet.dockerfile)):
        assert common_part(a) == common_part(b)
        assert fabric_layers(a) != fabric_layers(b)
        assert len(fabric_layers(a)) == (2 if flavour == "cuda" else 1)
    # the fabric layer comes after every common step of the final stage (shared Docker layers)
    final_stage = ours.dockerfile.split("\nFROM ")[-1]
    before_layer, layer_and_after = final_stage.split(f"# {recipe.FABRIC_BEGIN}")
    assert "COPY bench" in before_layer and "RUN" not in layer_and_after.split(recipe.FABRIC_END)[1]


def test_fabric_layers_hold_the_fabric_packages(rendered):
    ib = fabric_layers(rendered[("infiniband", "cpu")].definition)[0]
    assert "ibverbs-providers" in ib and "perftest" in ib
    omnipath = fabric_layers(rendered[("omnipath", "cuda")].dockerfile)
    assert "opa-psm2" in omnipath[0] and "--enable-psm2=/usr/local/libpsm2" in omnipath[0]
    assert "COPY --from=devel /usr/local/libpsm2" in omnipath[1]
    sling = fabric_layers(rendered[("slingshot", "cpu")].dockerfile)[0]
    assert "LD_LIBRARY_PATH=/opt/host/libfabric:/opt/host/libcxi:$LD_LIBRARY_PATH" in sling


def test_recipe_hash_is_stable_and_names_the_content():
    a = recipe.render("efa", "cuda", commit="x")
    assert a.recipe_hash == recipe.render("efa", "cuda", commit="x").recipe_hash
    assert a.recipe_hash != recipe.render("infiniband", "cuda", commit="x").recipe_hash
    assert len(a.recipe_hash) == 64 and recipe.HASH_PLACEHOLDER not in a.definition + a.dockerfile


@pytest.mark.parametrize("bad, message", [(("myrinet", "cpu"), "unknown fabric 'myrinet'"),
                                          (("efa", "gpu"), "unknown flavour 'gpu'")])
def test_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        recipe.render(*bad)


def test_recipe_hash_ignores_the_commit_label():
    a, b = recipe.render("ethernet", "cpu", commit="aaa"), recipe.render("ethernet", "cpu", commit="bbb")
    assert a.recipe_hash == b.recipe_hash and a.definition != b.definition
