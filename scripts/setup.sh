#!/usr/bin/env bash
# One-command set-up on Debian/Ubuntu: system packages, .venv, Horovod.
# Every step is skipped when its inputs are unchanged, so a rerun takes seconds.
#
#   scripts/setup.sh [--test]     --test also installs what the test suite drives
#                                 (Slurm, debootstrap, squashfs tools)
set -euo pipefail
# Paths given relative to the caller's directory are made absolute before the cd.
venv=$(realpath -m -- "${VENV:-.venv}")
cache=$(realpath -m -- "${FABRIC_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabric-bench}")
export FABRIC_BENCH_CACHE=$cache
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

packages=(openmpi-bin libopenmpi-dev ucx-utils libfabric-bin iproute2 cmake g++ make patch)
[[ ${1:-} == --test ]] && packages+=(slurm-wlm debootstrap squashfs-tools libcap2-bin util-linux)

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing system packages; as root run: apt-get install ${missing[*]}" >&2
    exit 2
  fi
  echo "setup: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# .venv, keyed by the requirement files and the interpreter
venv_key=$(cat requirements.txt requirements-nodeps.txt pyproject.toml <("$python" -VV) | sha256sum | cut -c1-16)
if [[ ! -f $venv/.fabric-bench-venv-$venv_key ]]; then
  echo "setup: creating $venv (torch, TensorFlow; ~3 min from local wheels)"
  [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r requirements.txt
  "$venv/bin/python" -m pip install -q --no-deps -r requirements-nodeps.txt
  "$venv/bin/python" -m pip install -q --no-deps -e .
  rm -f "$venv"/.fabric-bench-venv-*
  touch "$venv/.fabric-bench-venv-$venv_key"
fi

# Horovod from its sdist with the project's patch, cached by its inputs
wheel=$(containers/horovod/build-wheel.sh "$venv/bin/python" "$cache")
if [[ ! -f $venv/.horovod-wheel ]] || [[ $(cat "$venv/.horovod-wheel") != "$wheel" ]]; then
  "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"
  echo "$wheel" > "$venv/.horovod-wheel"
fi
# The test suite builds and runs real Apptainer images. Debian 12 has no
# apptainer package: provision one (CI/test set-up only; sites have their own).
if [[ ${1:-} == --test ]]; then  # idempotent: ~1 s when nothing changed
  scripts/provision-apptainer.sh
fi
echo "setup: ready ($venv, Horovod $(basename "$wheel"))"
