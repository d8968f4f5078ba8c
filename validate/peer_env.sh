# Sourced (bash): put the slim FlashInfer build carried in .peers/ on PYTHONPATH on a GPU host
# with no network. .peers/ holds what shared/tools/flashinfer-slim.sh wrote (fi.tar.xz, the
# tvm-ffi wheel) and, once a session has built FlashInfer's modules, the archive it left in
# $OUT (fi-jit-sm90.tar.xz): copied into .peers/, it spares the next session the JIT build.
# Nothing here is a dependency of tether: without .peers/ the peer arms refuse with the reason.
# .peers/fi-run.tar.xz, where carried, is the same FlashInfer without the C++ headers it builds
# modules from (validate/tools/peer_build_cpu.sh makes it beside the modules it builds): a host
# that only loads the carried modules needs no headers, and the working tree that travels to a
# lent host has room for the runtime archive where it has none for the whole one.
peer_site=${PEER_SITE:-/tmp/site}
peer_fi=.peers/fi-run.tar.xz
[ -f "$peer_fi" ] || peer_fi=.peers/fi.tar.xz
if [ -f "$peer_fi" ] && [ ! -d "$peer_site/flashinfer" ]; then
  mkdir -p "$peer_site"
  tar xJf "$peer_fi" -C "$peer_site"
  python3 -m pip install -q --no-index --no-deps --target "$peer_site" .peers/apache_tvm_ffi-*.whl
fi
# FlashInfer loads a module found at data/aot/<name>/<name>.so without building it
# (flashinfer/jit/env.py get_aot_artifacts, the "flashinfer-python" fallback path).
# A session's archive larger than a returned file may be comes back in parts (.00, .01, ...:
# validate/tools/peer_session.py); the parts, joined in name order, are the archive.
jit_parts=$(ls .peers/fi-jit-sm90.tar.xz .peers/fi-jit-sm90.tar.xz.[0-9][0-9] 2>/dev/null | sort)
if [ -n "$jit_parts" ] && [ -d "$peer_site/flashinfer" ]; then
  mkdir -p "$peer_site/flashinfer/data/aot"
  # shellcheck disable=SC2086  # the list is file names without spaces, split on purpose
  cat $jit_parts | tar xJf - -C "$peer_site/flashinfer/data/aot" &&
    echo "peer_env: FlashInfer modules restored from" $jit_parts >&2
fi
export PYTHONPATH="$PWD:$PWD/lib:$PWD/kernels:$peer_site${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=${MAX_JOBS:-16}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-workspace}
