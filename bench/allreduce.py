"""`python -m bench.allreduce ARGS`: bench.collective's allreduce (`--collective allreduce`), under
the name scripts, sites and the GPU check start it by (launch.fleet.locate's pairs,
benchmarks/gpu_check_plan.py). Its figures are bench.collective's and bench.collectives'."""

from __future__ import annotations

import sys
from typing import Optional

from bench.collective import figures, main as collective_main, message_sizes  # noqa: F401  (as before)
from bench.collectives import ALLREDUCE, gbit_s  # noqa: F401

busbw_factor = ALLREDUCE.busbw_factor  # nccl-tests: 2(n-1)/n


def main(argv: Optional[list[str]] = None) -> int:
    return collective_main(["--collective", ALLREDUCE.name, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
