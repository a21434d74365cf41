"""Which node or link of a Slurm allocation is slow: pairwise traffic as Slurm steps,
an outlier test, and the culprits named (`fabric-bench locate`).

Pattern: every pair of the allocation's nodes, each pair one Slurm step of two ranks
(one per node) running bench.allreduce at one message size: its point-to-point
ping-pong bandwidth (the pair's bandwidth, both directions in turn) and its 2-rank
allreduce busbw. Pairs are scheduled in rounds of disjoint pairs (the circle
method of a round-robin tournament), the steps of a round run at the same time:
N nodes cost N(N-1)/2 steps in N-1 rounds (N even; N rounds for N odd), as each
node takes part in one pair per round. That is the `all-pairs` pattern, the
default up to SCREEN_ABOVE (16) nodes. Above it (or with `--pattern screen`),
where N-1 rounds of a minute each is too long, a screen runs first: every node
with its ring neighbour and with the node N/2 away (3N/2 pairs, 3-4 rounds
whatever N, each node in 3 pairs), then all pairs only among the nodes of the
screen's slow pairs: O(1) rounds and O(N) steps for a healthy fleet, plus
k(k-1)/2 steps for k suspects. What the screen cannot see: a slow path between
two nodes that are neither neighbours nor opposite (a slow node or a node's own
link slows all of its pairs, so it is always seen); `all-pairs` sees every path.

Outlier test (a ratio to a robust reference, confirmed by re-measurement):
- reference R = the expected link rate when given (`--expect`), else the upper
  quartile of the pairs' bandwidths. Not the median: one slow node of N slows
  N-1 of the N(N-1)/2 pairs, half of them at N = 4, and a median would be one
  of them; the upper quartile stays a healthy pair while fewer than 3/4 are slow.
- a pair is slow when its bandwidth is below THRESHOLD (0.7) x R. Healthy pairs
  on the emulated links measure 0.9-1.0 of the shaped rate; a link at half its
  rate or a quarter (a bad NIC, a flapping lane) falls well below 0.7.
- every pair found slow is measured once more, and is slow only if both
  measurements are (its better one counts): one stall of a shared machine does
  not name a node.
- a node is slow when every pair it is in is slow (N >= 3): in a star topology
  that is the node itself or its own link, which pair traffic cannot tell apart;
  a slow pair not explained by a slow node is a slow link (the path between
  those two nodes). With N = 2 the one pair is its own upper quartile: only the
  expected rate (`--expect`) can show it slow, and then it is named as a link.

Results: DIR/locate.json (the pairs with their Slurm job and step ids, the test,
the verdict), DIR/heatmap.png and DIR/heatmap.html (pairwise bandwidth).

Modules: `pairs` (the schedule and the outlier test), `steps` (Slurm steps, and `locate`
itself), `result` (locate.json written and read back), `heatmap`. This package is their one
interface: callers write `locate.judge`, `locate.read_locate`, ...
"""

from launch.fleet.locate.heatmap import heatmap_figure, heatmap_html, matrix  # noqa: F401
from launch.fleet.locate.pairs import (
    MEASURED_PATTERNS,
    PATTERNS,
    SCREEN_ABOVE,
    THRESHOLD,
    UPPER_QUANTILE,  # noqa: F401
    Pair,
    Verdict,
    disjoint_rounds,
    judge,
    pattern_for,
    quantile,
    rounds,
    screen_pairs,
)
from launch.fleet.locate.result import MAX_LOCATE_BYTES, Named, named, named_nodes, read_locate, write  # noqa: F401
from launch.fleet.locate.steps import (
    DEFAULT_BYTES,
    STEP_TIMEOUT_S,
    allocate,
    hostnames,
    locate,
    measure,  # noqa: F401
    read_pair,
    run_round,
    step_argv,
    step_env,
)
