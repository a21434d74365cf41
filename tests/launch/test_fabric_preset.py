"""A run's fabric preset is resolved once, into one value the plan, the job script and preflight
read; the trust checks run where a spec enters (its validation) and at the job-script sink,
nowhere between (issue 40, item 3). The calls are counted by tracing the real code."""

import dataclasses
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

import containers.fabrics
from containers import ompi_rules
from containers.fabrics import INFINIBAND, SiteKey
from launch import trust
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from launch.runs.run import prepare
from launch.site import config, fabric_preset, preflight
from launch.site.config import FabricSite, Site, load_site, site_to_toml

SITE = Site(
    fabrics={
        "infiniband": FabricSite(interface="ib0", device="mlx5_0,mlx5_1"),
        "ethernet": FabricSite(interface="eth0"),
    }
)


def ib_batch_run(**changes) -> RunSpec:
    return RunSpec(
        **{
            **dict(
                engine="horovod",
                ranks=4,
                nodes=2,
                runtime="apptainer",
                launcher="sbatch",
                image="/img/fb.sif",
                fabric="infiniband",
                gpus_per_node=4,
                allreduce="nccl",
                gpudirect="on",
                partition="gpu",
            ),
            **changes,
        }
    )


@contextmanager
def calls_of(*functions):
    """Counts calls of `functions` (by their code) and, per function, who called it."""
    codes = {f.__code__: f.__qualname__ for f in functions}
    counted: Counter = Counter()

    def watch(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counted[(codes[frame.f_code], frame.f_back.f_code.co_qualname)] += 1

    sys.setprofile(watch)
    try:
        yield counted
    finally:
        sys.setprofile(None)


def by_function(counted: Counter) -> Counter:
    out: Counter = Counter()
    for (name, _), n in counted.items():
        out[name] += n
    return out


def test_a_run_resolves_its_fabric_once_and_preflight_reads_the_preset(tmp_path):
    """prepare + preflight's fabric checks of an InfiniBand batch run: one resolve, one registry lookup."""
    with calls_of(
        fabric_preset.resolve, containers.fabrics.profile, fabric_preset.site_values, fabric_preset.coll_rules
    ) as counted:
        spec = ib_batch_run()
        prepared = prepare(spec, tmp_path, SITE, run_id="r")
        checks = preflight.fabric_checks(spec, prepared, run=lambda argv: (0, ""), root=tmp_path)
    assert by_function(counted) == {"resolve": 1, "profile": 1, "site_values": 1, "coll_rules": 1}
    preset = prepared.preset
    assert preset.profile is INFINIBAND and preset.env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert "/dev/infiniband/uverbs*" in [node.glob for node in preset.device_nodes]
    assert any(c.check.startswith("device /dev/infiniband/uverbs") for c in checks)  # from the preset's nodes
    assert "export NCCL_IB_HCA==mlx5_0,mlx5_1\n" in prepared.job_script


def test_the_preset_carries_the_collective_rules_the_plan_writes(tmp_path):
    spec = RunSpec(benchmark="allreduce", backend="mpi", ranks=2, fabric="ethernet")
    prepared = prepare(spec, tmp_path, SITE, run_id="r")
    rules_file = prepared.run_dir / ompi_rules.FILE_NAME
    assert prepared.preset.coll_rules and prepared.plan.run_files == {rules_file: prepared.preset.coll_rules}
    assert prepared.command.env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == str(rules_file)
    steered = dataclasses.replace(spec, extra_env={"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"})
    assert prepare(steered, tmp_path, SITE, run_id="r2").preset.coll_rules is None


@pytest.mark.parametrize("fabric", ["emu-eth-1g", None])
def test_an_emulated_run_resolves_to_ethernets_variant(fabric):
    """With or without an emu-eth-<rate> name: ethernet's profile and rules on the namespaces'
    own interface, which no site [env] can rename (the site's interfaces are not there)."""
    spec = RunSpec(benchmark="allreduce", backend="mpi", launcher="emulated", nodes=2, ranks=2, fabric=fabric)
    site = dataclasses.replace(Site.default(), env={"OMPI_MCA_btl_tcp_if_include": "eth7", "NCCL_DEBUG": "WARN"})
    preset = fabric_preset.resolve(spec, site)
    assert preset.profile is containers.fabrics.ETHERNET and preset.coll_rules and preset.fabric == fabric
    assert preset.env["OMPI_MCA_btl_tcp_if_include"] == preset.env["FABRIC_BENCH_MASTER_IFNAME"] != "eth7"
    assert preset.env["NCCL_DEBUG"] == "WARN"


def test_trust_checks_run_at_validation_and_at_the_job_script_only(tmp_path):
    checks = (trust.check_text, trust.check_env)
    with calls_of(*checks) as counted:
        prepare(ib_batch_run(extra_env={"NCCL_DEBUG": "INFO"}), tmp_path, SITE, run_id="r")
    callers = {caller for (_, caller) in counted if not caller.startswith(("check_", "RunSpec.validated"))}
    assert callers == {"job_script"}
    assert counted[("check_env", "job_script")] == 1 and counted[("check_env", "RunSpec.validated")] == 1
    # a spec checked where it entered (an experiment file, say) is not checked again behind the door
    entered = ib_batch_run().validated()
    with calls_of(*checks) as counted:
        prepare(entered, tmp_path, SITE, run_id="r2")
    assert {caller for (_, caller) in counted if not caller.startswith("check_")} == {"job_script"}
    with pytest.raises(UsageError, match="control character"):  # a changed spec is a new one: checked
        prepare(dataclasses.replace(entered, partition="gpu\nrm -rf ~"), tmp_path, SITE, run_id="r3")


# ---------------------------------------------------------------- keys a profile declares (issue 43, item 3)

# what a RoCE profile would declare: its GID index and traffic class, filled into NCCL's variables
ROCE_LIKE = dataclasses.replace(
    INFINIBAND,
    site_keys=(
        SiteKey("gid_index", "a GID index, 0-255", int, minimum=0, maximum=255),
        SiteKey("traffic_class", "an IP traffic class, 0-255", int, minimum=0, maximum=255),
    ),
    nccl_env={**INFINIBAND.nccl_env, "NCCL_IB_GID_INDEX": "{gid_index}", "NCCL_IB_TC": "{traffic_class}"},
)


@pytest.fixture
def roce_like(monkeypatch):
    """The infiniband entry of the registry declaring site keys, as a RoCE profile would."""

    def lookup(name):
        return ROCE_LIKE if name == "infiniband" else containers.fabrics.profile(name)

    monkeypatch.setattr(config, "profile", lookup)
    monkeypatch.setattr(fabric_preset, "profile", lookup)


def site_file(tmp_path, keys: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(f'[fabrics.infiniband]\nhca = "mlx5_0"\ninterface = "eth2"\n{keys}\n')
    return path


def test_declared_site_keys_are_read_typed_and_fill_the_preset(tmp_path, roce_like):
    site = load_site(site_file(tmp_path, "gid_index = 3\ntraffic_class = 106"))
    assert site.fabrics["infiniband"].settings == (("gid_index", 3), ("traffic_class", 106))
    env = fabric_preset.resolve(ib_batch_run(), site).env
    assert (env["NCCL_IB_GID_INDEX"], env["NCCL_IB_TC"]) == ("3", "106")
    again = tmp_path / "again.toml"
    again.write_text(site_to_toml(site))
    assert load_site(again) == site


@pytest.mark.parametrize(
    "keys, message",
    [
        ('gid_index = "three"', "site.toml: [fabrics.infiniband].gid_index: expected a GID index, 0-255, got 'three'"),
        ("gid_index = 256", "site.toml: [fabrics.infiniband].gid_index: expected a GID index, 0-255, got 256"),
        (
            "traffic_class = true",
            "site.toml: [fabrics.infiniband].traffic_class: expected an IP traffic class, 0-255, got True",
        ),
        (
            "sl = 1",
            "site.toml: [fabrics.infiniband].sl: unknown key (expected one of interface, hca, gid_index, "
            "traffic_class, link_gbit_s)",
        ),
    ],
)
def test_a_bad_declared_key_is_one_line_naming_file_key_and_expectation(tmp_path, roce_like, keys, message):
    with pytest.raises(UsageError) as error:
        load_site(site_file(tmp_path, keys))
    assert str(error.value) == message


def test_an_undeclared_placeholder_value_is_refused_in_one_line(tmp_path, roce_like):
    """A declared key the site leaves out: the preset says which key and where to set it."""
    site = load_site(site_file(tmp_path, "gid_index = 3"))
    with pytest.raises(
        UsageError,
        match=r"needs the site setting 'traffic_class' \(set it under "
        r"\[fabrics.infiniband\] in the site file\)",
    ):
        fabric_preset.resolve(ib_batch_run(), site)
