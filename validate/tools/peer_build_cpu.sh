#!/usr/bin/env bash
# Builds FlashInfer's sm90 modules (every one an evidence session calls: peer_session.py
# session_specs) on a host with no GPU, into .peers/fi-jit-sm90.tar.xz, so that no device call
# spends its time on the JIT build (the H200 session restores them: validate/peer_env.sh).
#
#   bash validate/tools/peer_build_cpu.sh        # after shared/tools/flashinfer-slim.sh .peers
#
# It leaves .peers/fi-jit-sm90.tar.xz (the modules) and .peers/fi-run.tar.xz (FlashInfer without
# the headers only a build reads): carry those two and the tvm-ffi wheel to the lent host.
#
# Needs nvcc of the device's CUDA release (the modules link libcudart.so.<major>; the lent
# H200's is 13.0, as this workplace's CPU host's is), pip access for four small wheels, and
# patience: every module's CUDA sources compile on this host's cores (MAX_JOBS, default 2), so
# start it first and work beside it. What this host's CUDA lacks and the build asks for:
# curand's headers (CUTLASS's utilities include curand_kernel.h; taken from the nvidia-curand
# wheel, headers only) and a libcuda.so to link against (a stub: the modules call no driver symbol directly, so the linker
# drops it, and the real driver is found on the device).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$PWD/.venv/bin/python}
work=${PEER_BUILD_DIR:-/tmp/peer-build}
[ -f .peers/fi.tar.xz ] || { echo "peer_build_cpu: run shared/tools/flashinfer-slim.sh .peers first" >&2; exit 2; }
command -v nvcc >/dev/null || { echo "peer_build_cpu: no nvcc on PATH" >&2; exit 2; }
# The toolkit's root as nvcc itself reports it (a wrapper script on PATH hides it from readlink).
cuda=${CUDA_HOME:-$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)}
mkdir -p "$work/site" "$work/whl" "$work/curand" "$work/stub" "$work/out"
[ -d "$work/site/flashinfer" ] || tar xJf .peers/fi.tar.xz -C "$work/site"
# This host's Python's wheels of what FlashInfer imports (the .peers/ one is the device's 3.12).
tvm=$(basename .peers/apache_tvm_ffi-*.whl | sed 's/^apache_tvm_ffi-\([^-]*\)-.*/\1/')
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$work/whl" \
  "apache-tvm-ffi==$tvm" nvidia-ml-py tqdm nvidia-curand
# Each input of the build is written once per build folder: a rewrite gives tvm-ffi's and
# curand's headers and the stub new mtimes, which make ninja rebuild every module on the next
# run, where unchanged ones would be skipped.
if [ ! -d "$work/site/apache_tvm_ffi-$tvm.dist-info" ]; then
  "$PY" -m pip install -q --no-deps --upgrade --target "$work/site" \
    "$work"/whl/apache_tvm_ffi-*.whl "$work"/whl/nvidia_ml_py-*.whl "$work"/whl/tqdm-*.whl
fi
if [ -z "$(find "$work/curand" -name curand_kernel.h | head -1)" ]; then
  (cd "$work/curand" && "$PY" -m zipfile -e "$work"/whl/nvidia_curand-*.whl .)
fi
inc=$(dirname "$(find "$work/curand" -name curand_kernel.h | head -1)")
if [ ! -f "$work/stub/libcuda.so" ]; then
  echo 'void tether_libcuda_stub(void) {}' >"$work/stub/stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/stub.c"
fi
lib=$cuda/lib64
[ -e "$lib/libcudart.so" ] || lib=$cuda/lib
CPATH=$inc${CPATH:+:$CPATH} \
  FLASHINFER_EXTRA_LDFLAGS="-L$lib -L$work/stub" \
  PYTHONPATH="$PWD:$PWD/lib:$PWD/kernels:$work/site" \
  FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=${MAX_JOBS:-2} \
  FLASHINFER_WORKSPACE_BASE="$work/ws" OUT="$work/out" \
  "$PY" validate/tools/peer_session.py --build-only
cp "$work"/out/fi-jit-sm90.tar.xz* .peers/
# The runtime archive: FlashInfer without the headers its JIT builds from (cutlass, cccl,
# include, spdlog), for a host that loads the modules above and builds none
# (validate/peer_env.sh takes it first; carry it with them instead of fi.tar.xz).
tar -C "$work/site" -cf - --exclude=flashinfer/data/cutlass --exclude=flashinfer/data/cccl \
  --exclude=flashinfer/data/include --exclude=flashinfer/data/spdlog flashinfer |
  xz -T0 -6 >.peers/fi-run.tar.xz
ls -la .peers/fi-jit-sm90.tar.xz* .peers/fi-run.tar.xz
