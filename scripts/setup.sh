#!/usr/bin/env bash
# One-command set-up on Debian/Ubuntu: system packages, the venv, Horovod.
# Every step is skipped when its inputs are unchanged, so a rerun takes seconds.
#
#   scripts/setup.sh                the PyTorch side: all that `make bench` runs
#   scripts/setup.sh --without-horovod
#                                   the PyTorch side but Horovod: what `make bench`'s first
#                                   result (a DDP run) needs; it builds Horovod after that
#   scripts/setup.sh --tensorflow   and the TensorFlow side (tensorflow-cpu, keras, tf_keras,
#                                   and Horovod rebuilt with its TensorFlow ops)
#   scripts/setup.sh --test         the TensorFlow side and what the test suite drives
#                                   (Slurm, debootstrap, squashfs tools, Apptainer)
#
# Why two sides: Horovod builds from its sdist against the frameworks in the venv, and
# its TensorFlow ops add ~2 min to a ~5 min build (on 2 cores), TensorFlow's install
# ~1 more; the main job needs neither, so a fresh `make bench` shows its first result
# that much sooner. The Horovod wheel is cached per framework set (build-wheel.sh keys it
# by the frameworks it finds), so switching sides never rebuilds what was built once.
#
# VENV (default: the checkout's .venv) and FABRIC_BENCH_CACHE (default:
# ~/.cache/fabric-bench) may be relative to the caller's directory, absolute,
# and contain spaces or non-ASCII characters. One line per phase: what it did
# and how long it took; with FABRIC_BENCH_PHASE_LOG set, each phase is also
# appended there as "name<TAB>seconds<TAB>what" (.ci/run prints the table).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$(realpath -m -- "${VENV:-$repo/.venv}")
cache=$(realpath -m -- "${FABRIC_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabric-bench}")
export FABRIC_BENCH_CACHE=$cache
cd "$repo"
python=${PYTHON:-python3}
test_setup=false tensorflow_side=false horovod=true
case ${1:-} in
  "") ;;
  --test) test_setup=true tensorflow_side=true ;;
  --tensorflow) tensorflow_side=true ;;
  --without-horovod) horovod=false ;;
  *) echo "setup: unknown option ${1}; use --tensorflow, --test or --without-horovod (or nothing)" >&2; exit 2 ;;
esac

phase_name="" phase_started=0
phase() {  # NAME WHAT: start a phase (the line ends when the phase does)
  phase_name=$1 phase_what=$2 phase_started=$(date +%s.%N)
  printf 'setup: %-20s %s ... ' "$phase_name" "$phase_what"
}
done_phase() {  # [OUTCOME]: end the phase's line with its outcome and seconds
  local seconds outcome=${1:-done}
  seconds=$(awk -v a="$phase_started" -v b="${phase_ended:-$(date +%s.%N)}" 'BEGIN {printf "%.1f", b - a}')
  printf '%s (%s s)\n' "$outcome" "$seconds"
  if [[ -n ${FABRIC_BENCH_PHASE_LOG:-} ]]; then
    printf '%s\t%s\t%s: %s\n' "$phase_name" "$seconds" "$phase_what" "$outcome" >> "$FABRIC_BENCH_PHASE_LOG"
  fi
}
fail() {  # MESSAGE [LOG]: one line, exit 2 (bad set-up input) or 1 (a failed build, with its log)
  echo >&2
  echo "setup: $1" >&2
  exit "${2:-2}"
}

writable_dir() {  # WHAT DIR MIN_MIB: DIR can be created, written, and has room
  local what=$1 dir=$2 min_mib=$3 probe free_mib
  mkdir -p -- "$dir" 2>/dev/null || fail "$what $dir cannot be created (read-only or no permission); set ${4}"
  probe="$dir/.fabric-bench-write-test.$$"
  if ! { head -c 1048576 /dev/zero > "$probe"; } 2>/dev/null; then
    rm -f -- "$probe"
    fail "$what $dir is not writable (read-only or full); set ${4} to another directory"
  fi
  rm -f -- "$probe"
  free_mib=$(df -Pm -- "$dir" | awk 'NR == 2 {print $4}')
  ((free_mib >= min_mib)) ||
    fail "$what $dir has ${free_mib} MiB free, needs ${min_mib}; free space or set ${4}"
}
# The venv is ~6 GB; the cache holds the Horovod wheel, Apptainer's rootfs and images.
writable_dir "venv directory" "$(dirname "$venv")" 7000 VENV
writable_dir "cache directory" "$cache" "$($test_setup && echo 12000 || echo 500)" FABRIC_BENCH_CACHE

# autotools: sources cut from git get the configure their release tarball carries before an
# image build (containers/sources.py)
packages=(openmpi-bin libopenmpi-dev ucx-utils libfabric-bin iproute2 cmake g++ make patch
          autoconf automake libtool flex)
$test_setup && packages+=(slurm-wlm debootstrap squashfs-tools libcap2-bin util-linux chromium iperf3 podman runc
                            docker-registry prometheus prometheus-node-exporter)
phase "system packages" "${#packages[@]} Debian packages"
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  [[ $(id -u) -eq 0 ]] || fail "missing system packages; as root run: apt-get install ${missing[*]}"
  apt_log=$cache/logs/apt-get.log
  mkdir -p "$cache/logs"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1 ||
    fail "apt-get install ${missing[*]} failed; log: $apt_log" 1
  done_phase "installed ${missing[*]}"
else
  done_phase "present"
fi

# Apptainer for the test suite (--test; Debian 12 has none): provisioned from a Debian sid root,
# mostly downloads and unpacking, so it runs in the background beside the venv and the Horovod
# build (compiles), in its own process group; its line comes after Horovod's, with its own seconds.
# A failed step waits for it (no half-built root left); an interrupt ends it.
apptainer_pid="" apptainer_log=$cache/logs/provision-apptainer.log
if $test_setup; then
  mkdir -p "$cache/logs"
  setsid -w bash -c 'date +%s.%N > "$1.started"; scripts/provision-apptainer.sh > "$1" 2>&1; rc=$?
                     date +%s.%N > "$1.ended"; exit $rc' _ "$apptainer_log" < /dev/null &
  apptainer_pid=$!
  trap '[[ -z $apptainer_pid ]] || wait "$apptainer_pid"' EXIT
  trap '[[ -z $apptainer_pid ]] || kill -- -"$apptainer_pid" 2> /dev/null; apptainer_pid=""; exit 130' INT TERM
fi

# The venv, keyed by the requirement files and the interpreter. Its PyTorch side is every
# pinned requirement but those only TensorFlow runs use (TENSORFLOW_ONLY; their small
# dependencies come along, as TensorFlow's own install would bring them anyway).
TENSORFLOW_ONLY=(tensorflow_cpu keras)
venv_key=$(cat requirements.txt requirements-nodeps.txt requirements-host.txt pyproject.toml <("$python" -VV) |
           sha256sum | cut -c1-16)
phase "venv" "$venv: PyTorch side (torch, torchvision from local wheels, ~2 min)"
if [[ ! -f $venv/.fabric-bench-venv-$venv_key ]]; then
  [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
  pip_log=$venv/setup-pip.log
  torch_side=$venv/requirements-pytorch-side.txt
  grep -viE "^($(IFS='|'; echo "${TENSORFLOW_ONLY[*]}"))==" requirements.txt > "$torch_side"
  {
    "$venv/bin/python" -m pip install -q --upgrade pip &&
    "$venv/bin/python" -m pip install -q -r "$torch_side" &&
    "$venv/bin/python" -m pip install -q -r requirements-host.txt &&
    "$venv/bin/python" -m pip install -q --no-deps -e .
  } >"$pip_log" 2>&1 || fail "pip install into $venv failed; log: $pip_log" 1
  rm -f "$venv"/.fabric-bench-venv-* "$venv"/.fabric-bench-tensorflow-*
  touch "$venv/.fabric-bench-venv-$venv_key"
  done_phase "created"
else
  done_phase "up to date"
fi
if $tensorflow_side; then
  phase "venv tensorflow" "TensorFlow side (${TENSORFLOW_ONLY[*]}, tf_keras; ~1 min)"
  if [[ ! -f $venv/.fabric-bench-tensorflow-$venv_key ]]; then
    {
      "$venv/bin/python" -m pip install -q -r requirements.txt &&
      "$venv/bin/python" -m pip install -q --no-deps -r requirements-nodeps.txt
    } >>"$venv/setup-pip.log" 2>&1 || fail "pip install of TensorFlow into $venv failed; log: $venv/setup-pip.log" 1
    touch "$venv/.fabric-bench-tensorflow-$venv_key"
    done_phase "installed"
  else
    done_phase "present"
  fi
fi

if ! $horovod; then
  echo "setup: ready without Horovod ($venv; scripts/setup.sh builds it)"
  exit 0
fi
# Horovod from its sdist with the project's patch, cached by its inputs: built with the
# frameworks the venv holds (a venv that has TensorFlow, from --tensorflow or from before
# the sides were split, keeps a Horovod with TensorFlow ops)
if "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is None)'; then
  sides="PyTorch and TensorFlow ops (~3 min when built)"
else
  sides="PyTorch ops only: all make bench runs (~5 min when built; TensorFlow ops: scripts/setup.sh --tensorflow)"
fi
phase "horovod wheel" "Horovod 0.28.1 from its sdist, $sides"
horovod_log=$cache/logs/horovod-build.log
mkdir -p "$cache/logs"
wheel=$(containers/horovod/build-wheel.sh "$venv/bin/python" "$cache" --host 2>"$horovod_log") ||
  fail "building Horovod failed; log: $horovod_log" 1
if grep -q "^building Horovod" "$horovod_log"; then done_phase "built"; else done_phase "cached"; fi
phase "horovod install" "$(basename "$(dirname "$wheel")")/$(basename "$wheel") into the venv"
if [[ ! -f $venv/.horovod-wheel ]] || [[ $(cat "$venv/.horovod-wheel") != "$wheel" ]]; then
  "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel" >>"$venv/setup-pip.log" 2>&1 ||
    fail "installing $wheel failed; log: $venv/setup-pip.log" 1
  echo "$wheel" > "$venv/.horovod-wheel"
  done_phase "installed"
else
  done_phase "present"
fi
# The test suite builds and runs real Apptainer images: the provisioning started above.
if $test_setup; then
  phase "apptainer" "Apptainer from a Debian sid root (~3 min when provisioned, beside the above)"
  provisioned=0
  wait "$apptainer_pid" || provisioned=$?
  apptainer_pid=""
  ((provisioned == 0)) || fail "provisioning Apptainer failed; log: $apptainer_log" 1
  phase_started=$(cat "$apptainer_log.started") phase_ended=$(cat "$apptainer_log.ended")
  if grep -q "debootstrap sid" "$apptainer_log"; then done_phase "provisioned"; else done_phase "present"; fi
fi
echo "setup: ready ($venv)"
