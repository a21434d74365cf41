#!/bin/sh
# Proves an image's stack (its %test; also `podman run IMG fabric-bench-image-test`).
#
#   fabric-bench-image-test openmpi=4.1.4 torch=2.14.1 ... [fabric tool ...]
#
# NAME=VERSION pairs are checked against what the image reports; any other
# argument names a command the fabric layer must provide. Exit 1 on a mismatch.
set -eu
fail() { echo "image-test: FAIL: $*" >&2; exit 1; }
ok() { echo "image-test: ok: $*"; }

py=python3
pyversion() { $py -c "import importlib.metadata as m; print(m.version('$1'))"; }
for check in "$@"; do
  case $check in
    openmpi=*) got=$(ompi_info --version | sed -n 's/^Open MPI v//p' | head -1) ;;
    ucx=*) got=$(ucx_info -v | sed -n 's/^# Version \([0-9.]*\).*/\1/p' | head -1) ;;
    libfabric=*) got=$(fi_info --version | sed -n 's/^libfabric: *//p' | head -1) ;;
    python=*) got=$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])') ;;
    torch=*|torchvision=*|horovod=*|numpy=*|mpi4py=*) got=$(pyversion "${check%%=*}") ;;
    tensorflow=*) got=$(pyversion tensorflow-cpu 2>/dev/null || pyversion tensorflow) ;;
    *=*) continue ;;
    *) command -v "$check" >/dev/null || fail "fabric tool $check missing"; ok "$check"; continue ;;
  esac
  want=${check#*=}
  case $got in "$want"|"$want"+*) ok "${check%%=*} $got" ;; *) fail "${check%%=*}: want $want, got '$got'" ;; esac
done

fi_info -l >/dev/null || fail "fi_info -l"
ucx_info -d >/dev/null || fail "ucx_info -d"
$py -c "import torch, torchvision, tensorflow, mpi4py.MPI, horovod.torch, bench.torch_train" ||
  fail "python imports"
ok "python imports (torch, torchvision, tensorflow, mpi4py, horovod.torch, bench)"
build=$(horovodrun --check-build)
for want in PyTorch MPI Gloo; do
  echo "$build" | grep -q "\[X\] $want" || fail "horovodrun --check-build lacks $want"
done
ok "horovodrun --check-build: PyTorch, MPI, Gloo"
# --check-build can claim support that was not built: prove it with a real init.
$py -c "import horovod.torch as hvd; hvd.init(); assert hvd.size() == 1 and hvd.mpi_built()" ||
  fail "horovod.torch init"
ok "horovod.torch init (MPI)"
