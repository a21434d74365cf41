#!/bin/sh
# Proves an image's stack (its %test; also `podman run IMG fabric-bench-image-test`).
#
#   fabric-bench-image-test openmpi=4.1.4 torch=2.14.1 ... [check ...] [fabric tool ...]
#
# NAME=VERSION pairs are checked against what the image reports; ldd:DIR, ldd-python:PKG,
# ompi-cuda, ompi:KIND:NAME, fi:PROVIDER, ucx:TRANSPORT, ucx-cuda, nccl-net:NAME,
# horovod-nccl, torch-cuda, tf-cuda, gdrcopy, fi-abi:FABRIC_X.Y, ompi-report, ucx-report,
# horovod-gpu-ops:OPS[:DIR], nccl-tests:PREFIX, aws-ofi-nccl-build[:hmem], fi-abi-plugin:FABRIC_X.Y
# are checks (below); any other argument names a command the fabric layer must provide. Exit 1 on a
# mismatch. `image-test: report: SECTION: TEXT` lines carry what a check saw (tools' own output),
# for the rehearsal record (containers.rehearse.self_test_report parses them).
set -eu
fail() { echo "image-test: FAIL: $*" >&2; exit 1; }
ok() { echo "image-test: ok: $*"; }
report() { section=$1; shift; sed "s|^|image-test: report: $section: |"; }

py=python3
pyversion() { $py -c "import importlib.metadata as m; print(m.version('$1'))"; }
# Libraries the host's GPU driver brings (apptainer --nv): absent from every image by design.
driver_libs="libcuda.so.1 libnvidia-ml.so.1"
ucx_modules() {   # UCX's module directory (next to libucs)
  lib=$(ldd "$(command -v ucx_info)" | awk '/libucs\.so/ {print $3; exit}')
  echo "$(dirname "$lib")/ucx"
}
check_ldd() {     # every shared library under $1 resolves (driver libraries excepted)
  n=0 bad=""
  for f in $(find "$@" -name '*.so*' -type f 2>/dev/null); do
    file -b "$f" | grep -q 'ELF.*shared object' || continue
    n=$((n + 1))
    for lib in $(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'); do
      case " $driver_libs " in *" $lib "*) ;; *) bad="$bad $f:$lib" ;; esac
    done
  done
  [ -z "$bad" ] || fail "ldd: not found:$bad"
  [ "$n" -gt 0 ] || fail "ldd: no shared libraries under $*"
  ok "ldd: $n shared libraries under $* resolve (driver libraries from the host: $driver_libs)"
}
check_ldd_python() {  # a package under site-packages, with the frameworks' library folders
  # on the path as when Python has imported them (torch/lib, tensorflow, and the nvidia/*/lib
  # of the CUDA wheels torch loads first: libcudart where no /usr/local/cuda is, cpu images)
  site=$($py -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  frameworks="$site/torch/lib:$site/tensorflow:$site/tensorflow/python"
  for dir in "$site"/nvidia/*/lib; do [ -d "$dir" ] && frameworks="$frameworks:$dir"; done
  LD_LIBRARY_PATH="$frameworks:${LD_LIBRARY_PATH:-}" check_ldd "$site/$1"
}
ucx_version() {  # ucx_info -v: "# Version X" up to 1.13, "# Library version: X" since
  ucx_info -v | sed -n -E 's/^# (Version|Library version:) ([0-9.]+).*/\2/p' | head -1
}
check_ucx_tl() {  # a UCX transport is built (a device for it may be absent here)
  case $1 in
    rc|ud|dc|rc_verbs|ud_verbs|rc_mlx5|ud_mlx5|dc_mlx5) module=libuct_ib.so ;;
    cuda_copy|cuda_ipc) module=libuct_cuda.so ;;
    gdr_copy) module=libuct_cuda_gdrcopy.so ;;
    sm) ucx_info -d | grep -qE 'Transport: (posix|sysv)' || fail "ucx: sm (posix/sysv) missing"
        ok "ucx: sm"; return ;;
    self|tcp) ok "ucx: $1 (built into libuct)"; return ;;
    *) fail "ucx: unknown transport $1" ;;
  esac
  ls "$(ucx_modules)"/$module* >/dev/null 2>&1 || fail "ucx: $1 needs $module, not in $(ucx_modules)"
  ok "ucx: $1 ($module)"
}
fabric_versions() {  # the libfabric symbol versions an ELF file needs (newest last)
  grep -ao 'FABRIC_[0-9]*[.][0-9]*' "$1" | sort -uV | tr '\n' ' '
}
check_nccl_tests() {  # nccl-tests' binaries (MPI=1): every library resolves but the driver's
  n=0 bad="" names=""
  for f in "$1"/bin/*_perf; do
    [ -x "$f" ] || continue
    n=$((n + 1)) names="$names ${f##*/}"
    for lib in $(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'); do
      case " $driver_libs " in *" $lib "*) ;; *) bad="$bad ${f##*/}:$lib" ;; esac
    done
  done
  [ "$n" -gt 0 ] || fail "nccl-tests: no binaries in $1/bin"
  [ -x "$1/bin/all_reduce_perf" ] || fail "nccl-tests: no all_reduce_perf in $1/bin"
  [ -z "$bad" ] || fail "nccl-tests: not found:$bad"
  echo "$names" | tr ' ' '\n' | sed '/^$/d' | report nccl-tests
  ldd "$1/bin/all_reduce_perf" | awk '/libnccl|libmpi[.]|libcudart/ {print "all_reduce_perf: " $1 " => " $3}' |
    report nccl-tests
  ok "nccl-tests: $n binaries in $1/bin resolve (MPI=1; driver libraries from the host: $driver_libs)"
}
check_horovod_gpu_ops() {  # horovod-gpu-ops:OPS[:DIR] -- the Horovod build first on PYTHONPATH
  ops=${1%%:*} dir=""
  case $1 in *:*) dir=${1#*:} ;; esac
  [ -z "$dir" ] || [ -d "$dir/horovod" ] || fail "horovod ($ops GPU operations): no $dir/horovod"
  got=$(PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" $py - "$ops" <<'PY'
import sys
import horovod
import horovod.torch as hvd
ops = sys.argv[1]
built = {"mpi_built": hvd.mpi_built(), "cuda_built": hvd.cuda_built(), "nccl_built": bool(hvd.nccl_built()),
         "gloo_built": hvd.gloo_built()}
print("file=%s %s" % (horovod.__file__, " ".join("%s=%s" % kv for kv in built.items())))
want = {"nccl": dict(nccl_built=True, cuda_built=True, mpi_built=True),
        "mpi": dict(nccl_built=False, cuda_built=True, mpi_built=True)}[ops]
sys.exit(0 if all(built[k] == v for k, v in want.items()) else 3)
PY
) || fail "horovod ($ops GPU operations): $got"
  if [ -n "$dir" ]; then
    case $got in "file=$dir/horovod/"*) ;; *) fail "horovod ($ops GPU operations): not imported from $dir ($got)" ;; esac
  fi
  echo "$got" | report "horovod $ops"
  PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" $py -c \
    'from horovod.runner.launch import run_commandline; run_commandline()' --check-build 2>&1 |
    grep -E '^ *\[[X ]\]' | report "horovod $ops"
  ok "horovod: ${dir:-the venv's} Horovod has $ops GPU operations ($got)"
}
check_nccl_net() {
  case $1 in
    Socket|IB) $py -c "import torch; assert torch.cuda.nccl.version()" || fail "nccl-net $1: no NCCL"
               ok "nccl-net: $1 (built into NCCL)" ;;
    *) # the file NCCL opens: libnccl-net-$NCCL_NET_PLUGIN.so (libnccl-net.so when unset), on the path
       plugin=libnccl-net${NCCL_NET_PLUGIN:+-$NCCL_NET_PLUGIN}.so found=""
       for dir in $(echo "${LD_LIBRARY_PATH:-}" | tr : ' ') /usr/lib /usr/local/lib; do
         [ -z "$found" ] && [ -e "$dir/$plugin" ] && found="$dir/$plugin"
       done
       [ -n "$found" ] || fail "nccl-net $1: no $plugin (NCCL_NET_PLUGIN=${NCCL_NET_PLUGIN:-}) on LD_LIBRARY_PATH"
       check_ldd "$(readlink -f "$found")"
       ok "nccl-net: $1 (NCCL opens $found)" ;;
  esac
}
for check in "$@"; do
  case $check in
    ldd:*) check_ldd "${check#ldd:}"; continue ;;
    ldd-python:*) check_ldd_python "${check#ldd-python:}"; continue ;;
    ompi-cuda) ompi_info --parsable --all | grep -q 'mpi_built_with_cuda_support:value:true' ||
                 fail "ompi_info: no CUDA support"; ok "ompi_info: CUDA support"; continue ;;
    ompi-report) # what ompi_info says of CUDA and UCX, as the record carries it
      ompi_info --parsable --all | grep -E 'mpi_built_with_cuda_support:value' | report ompi_info
      ompi_info | grep -E 'Configure command line|MCA (pml|osc|mtl): ' | sed 's/^ *//' | report ompi_info
      ompi_info --parsable --all | grep -q 'mpi_built_with_cuda_support:value:true' ||
        fail "ompi_info: no CUDA support"
      ompi_info | grep -qE 'MCA pml: ucx' || fail "ompi_info: no MCA pml ucx"
      ok "ompi_info: CUDA-aware, pml ucx (report above)"; continue ;;
    ucx-report) # ucx_info's version, configure flags and transports; the CUDA transports' modules
      ucx_info -v | report "ucx_info -v"
      # without a GPU driver here the CUDA transports have no device: -d lists what has one
      ucx_info -d | grep -E '^# *(Memory domain|Component|Transport|Device):' | sed 's/^# *//' | report "ucx_info -d"
      ls "$(ucx_modules)" | report "ucx modules"
      ls "$(ucx_modules)"/libuct_cuda.so* >/dev/null 2>&1 || fail "ucx: no libuct_cuda in $(ucx_modules)"
      ok "ucx_info: $(ucx_version), CUDA modules in $(ucx_modules)"
      continue ;;
    horovod-gpu-ops:*) check_horovod_gpu_ops "${check#horovod-gpu-ops:}"; continue ;;
    nccl-tests:*) check_nccl_tests "${check#nccl-tests:}"; continue ;;
    aws-ofi-nccl-build|aws-ofi-nccl-build:hmem) # the libfabric the plugin was built against
      built=/usr/local/aws-ofi-nccl/share/fabric-bench/built-against.txt
      [ -r "$built" ] || fail "aws-ofi-nccl: no $built"
      report aws-ofi-nccl < "$built"
      f=$(readlink -f /usr/local/aws-ofi-nccl/lib/libnccl-net-ofi.so)
      echo "libnccl-net-ofi.so needs $(fabric_versions "$f")" | report aws-ofi-nccl
      if [ "$check" = aws-ofi-nccl-build:hmem ]; then
        grep -q 'HAVE_DECL_FI_OPT_CUDA_API_PERMITTED 1' "$built" ||
          fail "aws-ofi-nccl: built against headers without FI_OPT_CUDA_API_PERMITTED (HMEM providers refused)"
        ok "aws-ofi-nccl: built with FI_OPT_CUDA_API_PERMITTED ($(head -1 "$built"))"
      else
        ok "aws-ofi-nccl: built against $(head -1 "$built")"
      fi
      continue ;;
    fi-abi-plugin:*) # the plugin needs no libfabric symbol version above the host ABI it targets
      max=${check#fi-abi-plugin:}
      f=$(readlink -f /usr/local/aws-ofi-nccl/lib/libnccl-net-ofi.so)
      need=$(fabric_versions "$f" | tr ' ' '\n' | sed '/^$/d' | tail -1)
      [ -n "$need" ] || fail "fi-abi-plugin: $f links no libfabric symbol version"
      [ "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -1)" = "$max" ] ||
        fail "fi-abi-plugin: libnccl-net-ofi.so needs $need, above $max"
      ok "fi-abi-plugin: libnccl-net-ofi.so needs at most $max ($need)"; continue ;;
    ompi:*:*) kind=${check#ompi:}; name=${kind#*:}; kind=${kind%%:*}
              ompi_info | grep -qE "MCA $kind: $name \(" || fail "ompi_info: no MCA $kind $name"
              ok "ompi_info: MCA $kind $name"; continue ;;
    fi:*) p=${check#fi:}
          if fi_info -l | grep -q "^$p:"; then ok "fi_info -l: $p"
          # a provider without its device here (efa, verbs) is not listed, but its start-up logs
          elif FI_LOG_LEVEL=info fi_info -l 2>&1 | grep -q "::$p:"; then
            ok "fi_info -l: $p (built in; not listed without a $p device here)"
          else fail "fi_info -l: no provider $p"; fi
          continue ;;
    ucx:*) check_ucx_tl "${check#ucx:}"; continue ;;
    ucx-cuda) ucx_info -v | grep -q -- '--with-cuda=' && ls "$(ucx_modules)"/libuct_cuda.so* >/dev/null 2>&1 ||
                fail "ucx_info -v: CUDA not built in"; ok "ucx: CUDA built in"; continue ;;
    nccl-net:*) check_nccl_net "${check#nccl-net:}"; continue ;;
    fi-abi:*) # fi-abi:FABRIC_X.Y -- the host's libfabric replaces the image's (Slingshot's cxi) and
              # the loader refuses it if it lacks a symbol version a libfabric user here needs:
              # none may need one above FABRIC_X.Y, the newest of the oldest host ABI supported
      max=${check#fi-abi:} users=0 over=""
      libdir=$(ompi_info --path libdir --parsable | sed -n 's/^path:libdir://p')
      # -L: Debian keeps libmca_common_ofi beside libmpi, a link under libdir points at it
      # (set -e: a folder find lacks must not end the list)
      # (the NCCL plugin has its own ceiling: fi-abi-plugin)
      files=$( { find -L "$libdir" -type f -name '*.so*' 2>/dev/null || true
                 command -v fi_info || true; } | xargs -r readlink -f | sort -u)
      for f in $files; do
        grep -qa 'libfabric[.]so[.]1' "$f" || continue
        users=$((users + 1))
        need=$(grep -ao 'FABRIC_[0-9]*[.][0-9]*' "$f" | sort -uV | tail -1)
        [ "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -1)" = "$max" ] || over="$over ${f##*/}:$need"
      done
      [ "$users" -gt 1 ] || fail "fi-abi: no libfabric user under $libdir"
      [ -z "$over" ] || fail "fi-abi: libfabric users need more than $max, which a host libfabric of that ABI lacks:$over"
      ok "fi-abi: $users libfabric users (fi_info, under $libdir) need at most $max"; continue ;;
    horovod-nccl) horovodrun --check-build | grep -q '\[X\] NCCL' ||
                    fail "horovodrun --check-build: no NCCL operations"
                  $py -c "import horovod.torch as hvd; assert hvd.nccl_built()" || fail "horovod: nccl_built() false"
                  ok "horovod: NCCL GPU operations built"; continue ;;
    tf-cuda) # TensorFlow's CUDA 12 libraries: all resolve among themselves, and TensorFlow's
             # CUDA build loads them from their folder (bench.tf_cuda)
      libs=$(ls -d "${FABRIC_BENCH_TF_CUDA:?}"/nvidia/*/lib | tr '\n' :)
      LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:-}" check_ldd "$FABRIC_BENCH_TF_CUDA"
      got=$($py -m bench.tf_cuda --check) || fail "$got"; ok "tf-cuda: $got"; continue ;;
    gdrcopy) ls /usr/local/gdrcopy/lib/libgdrapi.so.2* >/dev/null 2>&1 || fail "gdrcopy: no libgdrapi.so.2"
             check_ldd /usr/local/gdrcopy/lib; continue ;;
    torch-cuda) got=$($py -c "import torch; print('cuda', torch.version.cuda, 'nccl', '.'.join(map(str, torch.cuda.nccl.version())))") ||
                  fail "torch: CUDA/NCCL versions"; ok "torch: $got"; continue ;;
    openmpi=*) got=$(ompi_info --version | sed -n 's/^Open MPI v//p' | head -1) ;;
    ucx=*) got=$(ucx_version) ;;
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
# What `horovodrun --check-build` asks (PyTorch's extension, MPI, Gloo), asked of the extension in
# one process (--check-build starts a process per question, each importing the frameworks: 15 s),
# and a real init, as a build can claim support it does not work with
got=$($py -c "import horovod.torch as hvd
built = {'mpi': hvd.mpi_built(), 'gloo': hvd.gloo_built()}
hvd.init()
print(' '.join(f'{k}_built={v}' for k, v in built.items()), f'size={hvd.size()}')") ||
  fail "horovod.torch: import or init"
[ "$got" = "mpi_built=True gloo_built=True size=1" ] || fail "horovod.torch: want MPI and Gloo built, got $got"
ok "horovod.torch: PyTorch extension with MPI and Gloo ($got)"
ok "horovod.torch init (MPI)"
horovodrun --help > /dev/null || fail "horovodrun --help"
ok "horovodrun: the launcher loads"
