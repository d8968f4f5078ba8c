#!/usr/bin/env bash
# One lent-H200 call (.library/device `run`), around ci/h200-session.sh: install, FlashInfer
# restored from the carried archives (and, with PEERCHECK=1, checked to load every module a
# session calls), GPU tests that must pass before anything is measured, then the session, its
# runs signed with the carried key.
#
#   SHA=<full sha of the commit copied> [TESTS=...] [PEERCHECK=1] [PLAN=...] [END_S=...] \
#     [SWEEPS=... ROUND2=... TUNE=1 PREBUILD=0 GATE=0 TCACHE=0] bash ci/h200-call.sh
#
# SHA: typed as it is where the commit is (the copy's .git may name another commit).
# TESTS: pytest paths run first (TEST_N workers, TEST_S seconds); a failure stops the call, so
#   no run measures code the tests refute.
# PEERCHECK=1: refuse to start when a module of peer_session.session_specs would be built
#   rather than restored from .peers/ (validate/tools/peer_session.py --check-restored): a JIT
#   build inside a timed step runs it past its limit; validate/tools/peer_build_cpu.sh makes
#   the archive with no device time.
# The signing key travels packed as scratch/hostkey.tar.xz (.hostkey/: the key, ssh-keygen and
#   the libraries it needs, which the device image lacks). Carry it with FlashInfer's runtime
#   archive, its modules and the tvm-ffi wheel, by name (.peers/fi-run.tar.xz,
#   .peers/fi-jit-sm90.tar.xz, .peers/apache_tvm_ffi-*.whl): the tracked tree and those must fit
#   the 64 MiB a call carries (the store is packed: tether store pack after every merge).
# The Triton kernel cache travels between calls as scratch/tcache.tar.xz (carry it by name):
#   each call starts a fresh host, whose first launch of every Gluon and Triton variant
#   compiles it inside a timed sweep's step (on 2026-12-06 the first runs of the policy
#   sweeps took longer than their second runs, which found every variant compiled). The cache
#   this call leaves comes back as $OUT/tcache.tar.xz: copy it to scratch/ for the next call.
#   A cached kernel is the same binary the compiler would make (Triton keys it by source,
#   options, compiler and target).
# END_S: seconds after the call's start by which every session step has ended (keep it under
#   the call's limit: packing and signing follow).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder that comes back}
: "${SHA:?set SHA to the full sha of the commit copied}"
if [ -f scratch/hostkey.tar.xz ]; then
  tar xJf scratch/hostkey.tar.xz
  export PATH=$PWD/.hostkey/bin:$PATH
fi
export TRITON_CACHE_DIR=/tmp/tcache
mkdir -p "$TRITON_CACHE_DIR"
[ -f scratch/tcache.tar.xz ] && tar xJf scratch/tcache.tar.xz -C "$TRITON_CACHE_DIR"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 ||
  { tail /tmp/pip.log; exit 1; }
# FlashInfer from .peers/ before the tests, so the peers' GPU tests run rather than skip.
source validate/peer_env.sh
if [ -n "${PEERCHECK-}" ]; then
  python3 validate/tools/peer_session.py --check-restored ||
    { echo "h200-call: FlashInfer modules would be built on the host; nothing measured"; exit 1; }
fi
if [ -n "${TESTS-}" ]; then
  # shellcheck disable=SC2086  # TESTS is a list of paths, split on purpose
  timeout -s INT -k 10 "${TEST_S:-240}" python3 -m pytest -q -p no:cacheprovider \
    -n "${TEST_N:-8}" $TESTS >"$OUT/tests.log" 2>&1
  rc=$?
  tail -25 "$OUT/tests.log"
  echo "tests rc=$rc after $(($(date +%s) - T0)) s"
  [ "$rc" = 0 ] || { echo "h200-call: tests failed; nothing measured"; exit 1; }
fi
DEADLINE=$((T0 + ${END_S:-570})) OUT=$OUT TETHER_GIT_SHA=$SHA TETHER_GIT_DIRTY=0 \
  GATE=${GATE:-0} bash ci/h200-session.sh "${PLAN:-sweeps}"
# TCACHE=0: no cache packed (a host kept warm for the next call still has /tmp/tcache, and a
# cache over the 16 MiB a returned file may be does not come back).
[ "${TCACHE:-1}" = 1 ] && tar -C "$TRITON_CACHE_DIR" -cf - . | xz -T0 -3 >"$OUT/tcache.tar.xz"
echo "h200-call: done after $(($(date +%s) - T0)) s"
