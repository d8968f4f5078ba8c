#!/usr/bin/env bash
# The GPU host's FlashInfer, from the slim build carried in .peers/ (no network there), then a
# Python session that uses it: validate/peer_session.py by default, or the script named first.
#
#   bash validate/peer_session.sh                           # build or restore, check, sweeps
#   bash validate/peer_session.sh validate/gluon_session.py # the Gluon kernel's session
#   bash validate/peer_session.sh -m pytest -q -p no:xdist validate/correctness/test_gluon.py
#
# .peers/ holds what shared/tools/flashinfer-slim.sh wrote (fi.tar.xz, the tvm-ffi wheel) and,
# once a session has built FlashInfer's modules, the archive it left in $OUT
# (fi-jit-sm90.tar.xz): copied into .peers/, it spares the next session the JIT build.
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/peer-out}
mkdir -p "$OUT"
site=${PEER_SITE:-/tmp/site}
if [ ! -d "$site/flashinfer" ]; then
  mkdir -p "$site"
  tar xJf .peers/fi.tar.xz -C "$site"
  python3 -m pip install -q --no-index --no-deps --target "$site" .peers/apache_tvm_ffi-*.whl
fi
# FlashInfer loads a module found at data/aot/<name>/<name>.so without building it
# (flashinfer/jit/env.py get_aot_artifacts, the "flashinfer-python" fallback path).
if [ -f .peers/fi-jit-sm90.tar.xz ]; then
  mkdir -p "$site/flashinfer/data/aot"
  tar xJf .peers/fi-jit-sm90.tar.xz -C "$site/flashinfer/data/aot"
  echo "peer_session: restored FlashInfer modules from .peers/fi-jit-sm90.tar.xz" >&2
fi
export PYTHONPATH="$PWD:$PWD/lib:$PWD/kernels:$site${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=${MAX_JOBS:-16}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-workspace}
if [ "${1:-}" = "-m" ]; then
  exec python3 "$@"  # a module (pytest) with FlashInfer on the path
fi
script=${1:-validate/peer_session.py}
[ $# -gt 0 ] && shift
exec python3 "$script" "$@"
