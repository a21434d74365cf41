"""Site config: validation on load, errors naming file/key/expectation, init from the probe."""

from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.site.config import FabricSite, Scheduler, Site, load_site, site_from_probe, site_to_toml
from tests.conftest import fabric_bench
from tests.launch.test_probe import recorded

FULL = """
runtime = "apptainer"
launcher = "srun"
modules = ["openmpi/4.1.6", "cuda/12.4"]
binds = ["/scratch", "/opt/cray:/opt/cray:ro"]

[scheduler]
partition = "gpu"
account = "proj42"
time_limit = "01:30:00"

[env]
NCCL_DEBUG = "WARN"

[fabrics.ethernet]
interface = "eth0"

[fabrics.infiniband]
hca = "mlx5_0"
interface = "ib0"

[fabrics.slingshot]
device = "cxi0"
interface = "hsn0"
"""


def write(tmp_path, text, name="site.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_full_site_loads_into_typed_objects(tmp_path):
    site = load_site(write(tmp_path, FULL))
    assert (site.runtime, site.launcher) == ("apptainer", "srun")
    assert site.modules == ("openmpi/4.1.6", "cuda/12.4")
    assert site.binds == ("/scratch", "/opt/cray:/opt/cray:ro")
    assert site.scheduler == Scheduler("gpu", "proj42", 90)
    assert site.scheduler.slurm_time() == "01:30:00"
    assert site.env == {"NCCL_DEBUG": "WARN"}
    assert site.fabrics == {
        "ethernet": FabricSite("eth0"),
        "infiniband": FabricSite("ib0", "mlx5_0"),
        "slingshot": FabricSite("hsn0", "cxi0"),
    }


@pytest.mark.parametrize(
    "limit, minutes, slurm",
    [
        ("2-00:00:00", 2880, "2-00:00:00"),
        (45, 45, "00:45:00"),
        ("00:00:30", 1, "00:01:00"),
        ("90:30", 91, "01:31:00"),  # Slurm's M:S
        ("1-12", 2160, "1-12:00:00"),  # D-H
        ("1-2:30", 1590, "1-02:30:00"),  # D-H:M
    ],
)
def test_time_limit_forms(tmp_path, limit, minutes, slurm):
    value = f'"{limit}"' if isinstance(limit, str) else limit
    site = load_site(write(tmp_path, f"[scheduler]\ntime_limit = {value}\n"))
    assert site.scheduler.time_limit_min == minutes and site.scheduler.slurm_time() == slurm


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[scheduler]\ntime_limit = "soon"\n',
            "site.toml: [scheduler].time_limit 'soon' is refused: a Slurm time: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S",
        ),
        (
            "runtime = 3\n",
            "site.toml: runtime: expected one of apptainer | singularity | podman | charliecloud | host, got 3",
        ),
        ('launcher = "pbs"\n', "site.toml: launcher: expected one of local | mpirun | srun | sbatch"),
        ('colour = "blue"\n', "site.toml: colour: unknown key (expected one of runtime, launcher"),
        (
            '[scheduler]\nqueue = "gpu"\n',
            "site.toml: [scheduler].queue: unknown key (expected one of partition, account, time_limit)",
        ),
        ('modules = "openmpi"\n', "site.toml: modules: expected a list of non-empty strings, got 'openmpi'"),
        ('binds = ["scratch"]\n', "site.toml: binds: expected entries SRC[:DST[:OPTS]] with an absolute SRC"),
        ("[env]\nOMP_NUM_THREADS = 4\n", "site.toml: [env].OMP_NUM_THREADS: expected a string value, got 4"),
        ('[fabrics.myrinet]\ninterface = "my0"\n', "site.toml: [fabrics].myrinet: unknown key"),
        (
            '[fabrics.infiniband]\ndevice = "mlx5_0"\n',
            "site.toml: [fabrics.infiniband].device: unknown key (expected one of interface, hca, link_gbit_s)",
        ),
        ('[fabrics.ethernet]\ninterface = ["eth0"]\n', "site.toml: [fabrics.ethernet].interface: expected"),
        ("runtime = \n", "site.toml: not valid TOML"),
    ],
)
def test_bad_site_is_one_usage_error_naming_file_and_key(tmp_path, text, message):
    with pytest.raises(UsageError) as error:
        load_site(write(tmp_path, text))
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_default_site_is_this_host_over_ethernet():
    site = Site.default()
    assert (site.runtime, site.launcher, list(site.fabrics)) == ("host", "local", ["ethernet"])
    assert site.scheduler.slurm_time() is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["site", "show", "--site", "/nonexistent/site.toml"], "/nonexistent/site.toml: site file not found"),
        (["site", "show"], "--site"),
    ],
)
def test_site_show_bad_input_exits_2_with_one_line(args, message):
    proc = fabric_bench(*args, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_site_show_rejects_invalid_file_and_prints_valid_one(tmp_path):
    bad = write(tmp_path, '[scheduler]\ntime_limit = "soon"\n', "bad.toml")
    proc = fabric_bench("site", "show", "--site", str(bad), timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "fabric-bench: error: bad.toml: [scheduler].time_limit 'soon' is refused: a Slurm time: M, M:S, H:M:S, "
        "D-H, D-H:M or D-H:M:S (ASCII digits), at most 366 days"
    )
    good = write(tmp_path, FULL, "good.toml")
    proc = fabric_bench("site", "show", "--site", str(good), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'hca = "mlx5_0"' in proc.stdout and 'time_limit = "01:30:00"' in proc.stdout


def test_site_init_writes_a_loadable_file_from_the_probe_and_refuses_to_overwrite(tmp_path):
    output = tmp_path / "site.toml"
    proc = fabric_bench("site", "init", "--output", str(output), timeout=120)
    assert proc.returncode == 0, proc.stderr
    site = load_site(output)
    up = [
        p.name
        for p in sorted(Path("/sys/class/net").iterdir())
        if p.name != "lo" and (p / "operstate").read_text().strip() == "up"
    ]
    assert site.fabrics["ethernet"].interface == up[0]
    written = output.read_text()
    proc = fabric_bench("site", "init", "--output", str(output), timeout=120)
    assert proc.returncode == 2 and "exists; pass --force" in proc.stderr
    assert output.read_text() == written
    proc = fabric_bench("site", "init", "--output", str(output), "--force", timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "source, fabric, device",
    [
        ("connectx-infiniband", "infiniband", "mlx5_0"),
        ("omnipath-hfi1", "omnipath", "hfi1_0"),
        ("efa", "efa", "efa_0"),
        ("slingshot-cxi", "slingshot", "cxi0"),
    ],
)
def test_site_from_recorded_probe_round_trips(tmp_path, source, fabric, device):
    site = site_from_probe(recorded(source))
    assert site.fabrics[fabric].device == device
    assert "infiniband" not in site.fabrics or fabric == "infiniband"
    again = load_site(write(tmp_path, site_to_toml(site, "header\nlines")))
    assert again == site


def test_full_site_round_trips_through_toml(tmp_path):
    site = load_site(write(tmp_path, FULL))
    assert load_site(write(tmp_path, site_to_toml(site), "again.toml")) == site
