#!/usr/bin/env bash
# `make test`: the whole suite, real processes throughout (the README's test command and CI's).
#
#   1. the cpu-debian ethernet image the slow tests run (tests/conftest.py IMAGE_FLAVOUR) starts
#      building in the background, its output in IMAGE_LOG; meanwhile
#   2. the unit tests (-m "not slow") run on both cores (pytest-xdist, a file's tests on one
#      worker): much of a cold build is debootstrap, apt and pip downloads, so both fit;
#   3. the build is waited for: a failed one fails the run, the end of its log shown here, and
#      the slow tests that need no image still run;
#   4. the slow tests that time nothing run two at a time (tests/conftest.py SIDE_BY_SIDE); then
#      the others one at a time, their timings, quiet checks and shaped links having the cores alone.
# One durations file for both halves, slowest first. With PYTEST_ARGS (a chosen subset) nothing
# is built ahead (the image fixture builds it if a chosen test needs it); TEST_IMAGE=1 builds
# ahead anyway, TEST_IMAGE=0 never.
#
#   scripts/test-suite.sh --image-only   the build alone (.ci/run starts it before lint): one
#                                        build at a time (a lock in the cache); a second waits
#                                        for the first and finds its image
#
# From the Makefile: VENV, TEST_DURATIONS, TEST_TIMEOUT, JOBS, PYTEST_ARGS (shell words, as on
# make's command line); FABRIC_BENCH, the command that builds (default: the venv's fabric-bench).
# With FABRIC_BENCH_PHASE_LOG set, each step's seconds go there too (.ci/run's table).
set -uo pipefail
self=$(realpath -- "$0")
cd "$(dirname "$self")/.."
venv=${VENV:-.venv}
durations=${TEST_DURATIONS:-results/test-durations.tsv}
timeout=${TEST_TIMEOUT:-1800}
jobs=${JOBS:-2}
eval "extra=(${PYTEST_ARGS:-})" # quoted as on make's command line (-k "a and b")
image_log=${IMAGE_LOG:-$(dirname "$durations")/test-image-build.log}
lock=${FABRIC_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabric-bench}/image-build.lock
mkdir -p "$(dirname "$durations")" "$(dirname "$image_log")" "$(dirname "$lock")"
pytest=("$venv/bin/python" -m pytest -ra --timeout="$timeout")

if [[ ${1:-} == --image-only ]]; then
  started=$SECONDS rc=0
  flock "$lock" "${FABRIC_BENCH:-$venv/bin/fabric-bench}" image build --fabric ethernet --flavour cpu-debian \
    --runtime apptainer > "$image_log" 2>&1 < /dev/null || rc=$?
  echo "image build: exit $rc after $((SECONDS - started)) s" >> "$image_log"
  exit "$rc"
fi

phase() { # NAME SECONDS WHAT: a step's line in .ci/run's phase table (not summed there: make test is)
  [[ -z ${FABRIC_BENCH_PHASE_LOG:-} ]] || printf '  %s\t%s\t%s\n' "$1" "$2" "$3" >> "$FABRIC_BENCH_PHASE_LOG"
}

build_pid="" build_started=$SECONDS
build_ahead=0
((${#extra[@]} > 0)) || ! command -v apptainer > /dev/null || build_ahead=1
build_ahead=${TEST_IMAGE:-$build_ahead}
if ((build_ahead == 1)); then
  # its own process group, so an interrupted run takes the whole build (apptainer, mksquashfs) with it
  IMAGE_LOG=$image_log setsid -w "$self" --image-only &
  build_pid=$!
  trap '[[ -z $build_pid ]] || kill -- -"$build_pid" 2> /dev/null' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  echo "make test: the cpu-debian image builds in the background (log: $image_log) while the unit tests run"
fi

unit=0 slow=0 built=0 started=$SECONDS
FABRIC_BENCH_TEST_DURATIONS="$durations.unit" "${pytest[@]}" -m "not slow" -n "$jobs" --dist loadfile \
  "${extra[@]}" || unit=$?
phase "unit tests (-n $jobs)" $((SECONDS - started)) "pytest -m 'not slow': exit $unit"

slow_marks="slow"
if [[ -n $build_pid ]]; then
  started=$SECONDS
  wait "$build_pid" || built=$?
  build_pid=""
  phase "image wait" $((SECONDS - started)) "after the unit tests, for the background build"
  phase "image (background)" $((SECONDS - build_started)) "fabric-bench image build cpu-debian: exit $built"
  if ((built != 0)); then
    echo "make test: building the cpu-debian image failed (exit $built); the last 60 lines of $image_log:" >&2
    tail -n 60 "$image_log" >&2
    echo "make test: the slow tests that need the image are left out; this run fails" >&2
    slow_marks="slow and not image"
  else
    tail -n 1 "$image_log"
  fi
fi

# the slow tests that time nothing and read no quiet machine (tests/conftest.py SIDE_BY_SIDE), two at
# a time, a file's tests on one worker, and the files that hold the disk's GBs one after another
# on one worker (tests/conftest.py SHARE_A_WORKER); then the rest one at a time, the cores theirs alone
paired=0 started=$SECONDS
FABRIC_BENCH_TEST_DURATIONS="$durations.paired" "${pytest[@]}" -m "($slow_marks) and side_by_side" \
  -n "$jobs" --dist loadgroup "${extra[@]}" || paired=$?
phase "slow tests side by side (-n $jobs)" $((SECONDS - started)) "pytest -m '($slow_marks) and side_by_side': exit $paired"
started=$SECONDS
FABRIC_BENCH_TEST_DURATIONS="$durations.slow" "${pytest[@]}" -m "($slow_marks) and not side_by_side" "${extra[@]}" ||
  slow=$?
phase "slow tests (one at a time)" $((SECONDS - started)) "pytest -m '($slow_marks) and not side_by_side': exit $slow"

{
  printf '# seconds\toutcome\tmarkers\ttest (setup + call + teardown; slowest first)\n'
  cat "$durations.unit" "$durations.paired" "$durations.slow" 2> /dev/null | grep -v '^#' | sort -g -r
} > "$durations"
rm -f "$durations.unit" "$durations.paired" "$durations.slow"
echo "every test's time (setup + call + teardown, slowest first): $durations"
((built == 0)) || exit 1
# pytest's "no tests" (5) from one part is no failure; from all three it is
for rc in $unit $paired $slow; do case $rc in 0 | 5) ;; *) exit "$rc" ;; esac; done
[[ $unit$paired$slow != 555 ]] || exit 5
