#!/usr/bin/env bash
# The GPU check: one prepared run of everything a lent GPU machine should prove.
#
#   benchmarks/gpu_check.sh [--cpu [--full] [--skip-probes]] [--out DIR] [--budget-s N] [--only LABELS] [--archive FILE.tar.gz]
#   benchmarks/gpu_check.sh --cpu --out /tmp/gpu-check     # the same steps, tiny, on CPUs
#
# Under --out (default results/gpu-check-<UTC time>) it writes:
#   environment.json   what it found: python, torch/CUDA/NCCL, torchvision, TF, Horovod, tools
#   captures/          nvidia-smi -q, nvidia-smi topo -m, nvidia-smi --query-gpu=... (or why absent)
#   runs/<label>/      one `fabric-bench run` per benchmark, in the bundle's result format
#                      (result.json, output.log with NCCL_DEBUG=INFO on GPUs, rank records)
#   nccl/<label>.log   the NCCL lines of each run that printed any
#   summary.json, summary.md   every step's status, img/s, compute-only img/s and step time
#   gpu_check.log      everything printed
# Runs: torch DDP (NCCL on a GPU, gloo with --cpu), 1 rank, ResNet-50, VGG-16 and
# Inception-v3 in fp32 and AMP; a 1-rank Horovod run where Horovod is installed;
# TensorFlow ResNet-50 fp32 and mixed where TensorFlow is. What is missing is
# recorded as absent, with the reason; nothing is fetched from outside.
#
# Which Python: $GPU_CHECK_PYTHON if set, else $VENV (make's venv), else the
# repository's .venv, else python3 on PATH -- the first that has torch (each one
# tried is reported; 10 s in all, the check's first step).
#
# Its steps' time limits add up to 300 s on a GPU, counted from here
# (benchmarks/gpu_check_plan.py: STEP_LIMITS_S). On a lent device machine (it
# returns at most 8 files from $OUT), e.g. with timeout_s 330:
#   benchmarks/gpu_check.sh --out /tmp/gc --archive $OUT/gpu-check.tar.gz; cp /tmp/gc/summary.* $OUT/
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)
find_python_s=10  # STEP_LIMITS_S[...]["python"]

if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

candidates=()
[[ -n ${GPU_CHECK_PYTHON:-} ]] && candidates+=("$GPU_CHECK_PYTHON")
# $VENV as make (and .ci/run) set it, then the checkout's default venv
[[ -n ${VENV:-} && -x $VENV/bin/python ]] && candidates+=("$VENV/bin/python")
[[ -x $repo/.venv/bin/python ]] && candidates+=("$repo/.venv/bin/python")
command -v python3 >/dev/null && candidates+=("$(command -v python3)")

python="" found_all=""
echo "gpu_check: looking for a Python with torch"
for candidate in "${candidates[@]}"; do
  left=$(( find_python_s - ($(date +%s) - started) ))
  if (( left <= 0 )); then line="python $candidate: not tried (${find_python_s} s spent finding a Python)"
  else  # find the package, import nothing: the check's own environment step imports and reports it
    found=$(timeout "$left" "$candidate" -c \
      'import importlib.util as u, sys; print(sys.version.split()[0], "torch" if u.find_spec("torch") else "")' \
      2>/dev/null | tail -1)
    if [[ $found == *torch ]]; then line="python $candidate: Python $found"; else line="python $candidate: no torch"; fi
  fi
  echo "  $line"
  found_all+="$line"$'\n'
  if [[ $line == *": Python "*torch ]]; then python=$candidate; break; fi
done
if [[ -z $python ]]; then
  python=${candidates[0]:-}
  [[ -z $python ]] && { echo "gpu_check: no python3 at all" >&2; exit 2; }
  echo "gpu_check: no Python with torch; $python records what is absent"
fi
echo "gpu_check: using $python"
export GPU_CHECK_FOUND="${found_all}using $python"
export GPU_CHECK_STARTED=$started

export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
exec "$python" "$repo/benchmarks/gpu_check.py" "$@"
