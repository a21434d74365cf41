#!/usr/bin/env bash
# Build (or reuse) the Horovod 0.28.1 wheel for the Python interpreter given.
#
#   build-wheel.sh PYTHON CACHE_DIR [--host]
#                                        -> prints the wheel's path on stdout
#
# --host: the host's wheel (scripts/setup.sh, containers/build_inputs.py; the cpu images install
# it): the same code without -g (toolchain-cxx20-without-debug-info.cmake), and TensorFlow's ops
# linked to the one gloo PyTorch's use (one-gloo.patch: gloo is compiled once, not twice). The
# images' own builds (cuda) keep Horovod's RelWithDebInfo and its two gloo builds, as their
# rehearsal records were built.
#
# The wheel is cached in CACHE_DIR/horovod-<key>/, where <key> hashes every input
# of the build: the sdist, this directory (patch, toolchain, script), the Python,
# torch, TensorFlow and MPI versions, and the CUDA toolkit. Same inputs, no rebuild.
set -euo pipefail
# Absolute before any cd (no symlink resolution: a venv's python is a symlink).
python=$1 cache=$(realpath -m -- "$2")
[[ $python == */* ]] && python=$(realpath -ms -- "$python")
here=$(cd "$(dirname "$0")" && pwd)
toolchain=$here/toolchain-cxx20.cmake host=false
case ${3:-} in
  "") ;;
  --host) toolchain=$here/toolchain-cxx20-without-debug-info.cmake host=true ;;
  *) echo "build-wheel.sh: unknown option $3 (--host)" >&2; exit 2 ;;
esac
version=0.28.1
sdist_sha256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0

cuda_home=${CUDA_HOME:-/usr/local/cuda}
inputs=$(
  cat "$here"/*.patch "$here"/*.cmake "$here/build-wheel.sh"
  echo "sdist $version $sdist_sha256"
  echo "toolchain $(basename "$toolchain") host $host"
  "$python" - <<'PY'
import importlib.metadata as md, sys
print(sys.version)
for dist in ("torch", "tensorflow-cpu", "tensorflow"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        print(dist, "absent")
PY
  ompi_info --version 2>/dev/null | head -1 || echo "no mpi"
  "$cuda_home/bin/nvcc" --version 2>/dev/null | tail -1 || echo "no cuda"
)
key=$(printf '%s' "$inputs" | sha256sum | cut -c1-16)
out="$cache/horovod-$key"
if compgen -G "$out/horovod-$version-*.whl" >/dev/null; then
  echo "$out"/horovod-$version-*.whl
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$python" -m pip download -q --no-deps --no-binary :all: "horovod==$version" >&2)
echo "$sdist_sha256  $work/horovod-$version.tar.gz" | sha256sum -c --quiet - >&2
tar -C "$work" -xzf "$work/horovod-$version.tar.gz"
src="$work/horovod-$version"
patch -d "$src" -p1 --quiet < "$here/tf-2.19-skip-xla-ops.patch"
if $host; then patch -d "$src" -p1 --quiet < "$here/one-gloo.patch"; fi

frameworks=$("$python" - <<'PY'
import importlib.util
flags = ["HOROVOD_WITH_PYTORCH=1"]
flags.append("HOROVOD_WITH_TENSORFLOW=1" if importlib.util.find_spec("tensorflow")
             else "HOROVOD_WITHOUT_TENSORFLOW=1")
print(" ".join(flags))
PY
)
# Horovod's CMake passes the frameworks' include and link flags unquoted: a venv
# path with spaces breaks them. Build through a space-free link to the venv.
build_python=$python
if [[ $python == *[[:space:]]* ]]; then
  ln -s "$(dirname "$(dirname "$python")")" "$work/venv"
  build_python="$work/venv/bin/$(basename "$python")"
fi
echo "building Horovod $version ($frameworks; the host's build with both: ~3 min on 2 cores)" >&2
mkdir -p "$out.tmp"
env $frameworks \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MXNET=1 \
  CMAKE_TOOLCHAIN_FILE="$toolchain" \
  CUDA_HOME="$cuda_home" CUDAToolkit_ROOT="$cuda_home" \
  HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-80,90,100} \
  MAKEFLAGS="-j$(nproc)" \
  "$build_python" -m pip wheel --no-deps --no-build-isolation -w "$out.tmp" "$src" >&2
mv "$out.tmp" "$out"   # only a finished build appears under the final name
echo "$out"/horovod-$version-*.whl
