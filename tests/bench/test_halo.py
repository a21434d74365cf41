import json
import shutil

import numpy as np
import pytest

from bench.halo import Block, bit_checksum, reference_checksum, split
from tests.conftest import fabric_bench, need


def test_split_covers_the_grid_evenly():
    parts = [split(10, 3, i) for i in range(3)]
    assert parts == [(0, 4), (4, 3), (7, 3)]
    assert sum(length for _, length in parts) == 10


def test_checksum_is_order_independent_and_exact():
    values = np.random.default_rng(0).random(1000)
    assert bit_checksum(values) == bit_checksum(values[::-1].copy())
    assert bit_checksum(values) != bit_checksum(values + 1e-16 * (values == values.max()))


def test_jacobi_relaxes_toward_the_boundary_value():
    block = Block(8, (1, 1, 1), (0, 0, 0))
    before = block.interior()[0].mean()
    for _ in range(50):
        block.relax()
    assert block.interior()[0].mean() > before and reference_checksum(8, 3) == reference_checksum(8, 3)


def halo_result(tmp_path, ranks, grid):
    out = tmp_path / f"r{ranks}"
    proc = fabric_bench(
        "run",
        "--benchmark",
        "halo",
        "--ranks",
        str(ranks),
        "--grid",
        str(grid),
        "--iters",
        "5",
        "--warmup",
        "1",
        "--results",
        str(out),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(next(out.glob("*/result.json")).read_text())


@pytest.mark.slow
def test_halo_decomposed_equals_one_rank(tmp_path):
    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    one = halo_result(tmp_path, 1, 23)
    three = halo_result(tmp_path, 3, 23)  # uneven split: 8+8+7 points
    assert one["status"] == three["status"] == "ok"
    assert three["dims"] == [3, 1, 1] and three["checksum"] == one["checksum"] == three["reference_checksum"]
    assert 0 <= three["comm_fraction"] <= 1 and three["time_per_iter_s"] > 0
