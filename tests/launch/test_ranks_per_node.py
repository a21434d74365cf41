"""Ranks per node reach the transport and plausibility checks from what a real result carries
(issue 42, item 2): the spec's ranks and nodes, the world size and the ranks' hosts. Every result
here is made through the bundle's own path (tests.results.through_the_bundle: the real plan and
command, bench.record, assemble, transport.apply, plausibility.verdict), never a hand-made spec;
the NCCL logs are recorded real ones (tests/data/nccl/*/SOURCE.md)."""

from pathlib import Path

import pytest

from launch.results.result import ranks_per_node
from launch.ranks.runspec import RunSpec
from launch.site.config import FabricSite, Site
from tests.results import through_the_bundle

NCCL_LOGS = Path(__file__).parents[1] / "data" / "nccl"
EIGHT_RAILS = ",".join(f"mlx5_{i}" for i in range(8))
SITE = Site(fabrics={"infiniband": FabricSite(interface="ib0", device=EIGHT_RAILS, link_gbit_s=400.0)})


def nodes_of(rank: int, per_node: int) -> str:
    return f"gpu{rank // per_node:02d}"


def train_rank(per_node: int):
    def fields(rank: int) -> dict:
        return {
            "kind": "train",
            "host": nodes_of(rank, per_node),
            "device": f"cuda:{rank % per_node}",
            "config": {"batch_size": 256},
            "engine_info": {"backend": "nccl"},
            "samples_img_per_s": [2900.0, 2910.0, 2905.0],
            "compute_samples_img_per_s": [3000.0] * 3,
            "params_max_abs_diff": 0.0,
            "params_sha256": "a" * 64,
            "gradient_bytes": 102_000_000,
        }

    return fields


def allreduce_rank(per_node: int, busbw_gbit_s: float):
    sizes = [
        {"bytes": b, "time_us": 1.0, "algbw_gbit_s": busbw_gbit_s, "busbw_gbit_s": busbw_gbit_s, "max_abs_error": 0.0}
        for b in (64 * 2**20, 256 * 2**20)
    ]

    def fields(rank: int) -> dict:
        return {
            "kind": "allreduce",
            "host": nodes_of(rank, per_node),
            "backend": "torch",
            "sizes": sizes,
            "p2p": [],
            "correct": True,
            "backend_info": {"process_group": "nccl"},
        }

    return fields


def test_two_nodes_of_four_ranks_on_eight_gpu_eight_nic_nodes_driving_four_nics_match(tmp_path):
    """Reproduced first: without ranks per node the check expected one NIC per GPU (8) where 4
    ranks run, and this healthy run became transport_mismatch ("asked 8 of 8 NICs")."""
    spec = RunSpec(
        engine="ddp",
        model="resnet50",
        ranks=8,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        allreduce="nccl",
        launcher="mpirun",
    ).validated()
    log = (NCCL_LOGS / "ib-gdrdma-a100" / "nccl_info.log").read_text()  # NET devices 0, 2, 4, 5: four NICs
    result = through_the_bundle(spec, SITE, tmp_path / "run", train_rank(4), log)
    assert "ranks_per_node" not in result["spec"]  # what real results hold: ranks and nodes
    assert ranks_per_node(result) == 4
    nics = next(c for c in result["transport"]["checks"] if c["layer"] == "nccl.nics")
    assert nics["ok"] and nics["asked"].startswith("4 of 8 NICs"), nics
    assert result["status"] == "ok", result["reason"]


def test_a_full_node_driving_those_four_nics_is_still_a_mismatch(tmp_path):
    spec = RunSpec(
        engine="ddp",
        model="resnet50",
        ranks=16,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        allreduce="nccl",
        launcher="mpirun",
    ).validated()
    log = (NCCL_LOGS / "ib-gdrdma-a100" / "nccl_info.log").read_text()
    result = through_the_bundle(spec, SITE, tmp_path / "run", train_rank(8), log)
    assert result["status"] == "transport_mismatch" and "asked 8 of 8 NICs" in result["reason"]


def test_a_healthy_eight_rail_run_without_channel_lines_is_healthy_not_faster_than_the_line(tmp_path):
    """NCCL printed no channel lines (roce-h100 log): the rails come from the site's 8 HCAs, one per
    rank on a node. 8 x 400 Gbit/s x 0.9 is healthy; counted as one NIC it read 'faster than the
    line rate'."""
    spec = RunSpec(
        benchmark="allreduce",
        backend="torch",
        ranks=16,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        launcher="mpirun",
    ).validated()
    log = (NCCL_LOGS / "roce-h100" / "nccl_info.log").read_text()
    result = through_the_bundle(spec, SITE, tmp_path / "run", allreduce_rank(8, 0.9 * 8 * 400), log)
    plaus = result["plausibility"]
    assert plaus["rails"] == 8 and "8 ranks per node" in plaus["rails_source"]
    assert plaus["verdict"] == "healthy" and plaus["ratio"] == pytest.approx(0.9)


def test_half_a_node_expects_half_the_rails(tmp_path):
    spec = RunSpec(
        benchmark="allreduce",
        backend="torch",
        ranks=8,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        launcher="mpirun",
    ).validated()
    result = through_the_bundle(spec, SITE, tmp_path / "run", allreduce_rank(4, 0.9 * 4 * 400))
    assert result["plausibility"]["rails"] == 4 and result["plausibility"]["verdict"] == "healthy"


@pytest.mark.parametrize(
    "result, expected",
    [
        ({"spec": {"ranks": 8, "nodes": 2}, "world_size": 8}, 4),
        ({"spec": {}, "world_size": 16, "hosts": ["a", "b"]}, 8),  # no spec fields: the ranks' hosts
        ({"spec": {"ranks_per_node": 3}}, 3),  # an older hand-made spec
        ({"spec": {}, "world_size": 2}, None),
    ],
)
def test_ranks_per_node_is_derived_from_what_a_result_carries(result, expected):
    assert ranks_per_node(result) == expected


def horovod_rank(per_node: int, cpu_ops: str):
    def fields(rank: int) -> dict:
        return {
            **train_rank(per_node)(rank),
            "engine_info": {"controller": "mpi", "nccl_built": True, "gpu_ops": "nccl", "cpu_ops": cpu_ops},
        }

    return fields


def test_the_transport_evidence_names_the_library_that_moved_the_gpu_buffers(tmp_path):
    """Issue 42, item 1: DDP on GPUs: NCCL, confirmed by NCCL's own lines in the run's log."""
    spec = RunSpec(
        engine="ddp",
        model="resnet50",
        ranks=8,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        allreduce="nccl",
        launcher="mpirun",
    ).validated()
    log = (NCCL_LOGS / "ib-gdrdma-a100" / "nccl_info.log").read_text()
    moved = through_the_bundle(spec, SITE, tmp_path / "run", train_rank(4), log)["transport"]["gpu_buffers"]
    assert moved["library"] == "nccl" and moved["confirmed"] is True and "process group" in moved["source"]


def test_an_older_horovod_mpi_run_on_gpus_is_shown_to_have_run_over_nccl(tmp_path):
    """Before the refusal, --allreduce mpi with Horovod on GPUs ran and passed as the MPI arm; read
    through the same path, such a run says NCCL moved its GPU buffers and is a transport mismatch."""
    older = RunSpec(
        engine="horovod",
        model="resnet50",
        ranks=8,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        allreduce="mpi",
        launcher="mpirun",
    )  # refused from issue 42 until Horovod's MPI build (issue 49); its engine_info says NCCL ran
    log = (NCCL_LOGS / "ib-gdrdma-a100" / "nccl_info.log").read_text()
    result = through_the_bundle(older, SITE, tmp_path / "run", horovod_rank(4, "mpi"), log)
    assert result["transport"]["gpu_buffers"]["library"] == "nccl"
    assert result["status"] == "transport_mismatch" and "gpu_buffers: asked mpi, ran over nccl" in result["reason"]


def test_a_horovod_run_of_its_mpi_build_records_mpi_and_the_path_asked_of_ucx(tmp_path):
    """Issue 49: Horovod's second build has MPI GPU operations; its result names MPI as the library
    that moved the GPU buffers (no mismatch with --allreduce mpi), the build that ran, and the path:
    GPUDirect on over InfiniBand asks UCX for RDMA from GPU memory (yes: nothing else passes)."""
    spec = RunSpec(
        engine="horovod",
        model="resnet50",
        ranks=8,
        nodes=2,
        gpus_per_node=8,
        fabric="infiniband",
        allreduce="mpi",
        gpudirect="on",
        launcher="mpirun",
    ).validated()
    build = "/opt/fabric-bench/horovod-mpi-gpu/horovod"
    info = {"controller": "mpi", "nccl_built": False, "gpu_ops": "mpi", "horovod_build": build, "cpu_ops": "mpi"}
    result = through_the_bundle(spec, SITE, tmp_path / "run", lambda rank: {**train_rank(4)(rank), "engine_info": info})
    moved = result["transport"]["gpu_buffers"]
    assert moved["library"] == "mpi" and build in moved["source"] and "gpu_buffers" not in (result.get("reason") or "")
    path = moved["path"]
    assert path["gpudirect_rdma_asked"] == "yes" and path["path"] == "gpudirect-rdma"
    assert "cuda_copy" in path["ucx_tls"] and path["ucx_gpu_transports"] is None  # no UCX lines in this log
    assert moved["confirmed"] is None


def test_a_cpu_run_has_no_gpu_buffers(tmp_path):
    spec = RunSpec(engine="ddp", model="resnet18", ranks=2, nodes=1, launcher="mpirun").validated()
    fields = lambda rank: {**train_rank(2)(rank), "engine_info": {"backend": "gloo"}}  # noqa: E731
    result = through_the_bundle(spec, Site(), tmp_path / "run", fields)
    assert result["transport"]["gpu_buffers"] is None and result["status"] == "ok"
