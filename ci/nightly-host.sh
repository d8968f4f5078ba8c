#!/usr/bin/env bash
# One host's nightly: set up, verify under the guard, run the sweeps under the guard.
# Usage: ci/nightly-host.sh ARCH OUT_DIR
# Every run this job records goes to OUT_DIR/store (uploaded as the job's artifact), never to
# results/: the final job merges all hosts into the store at once.
# Exit: 0 all measured and passed; 1 a step failed; 75 the host could not be had (the guard
# wrote a not_measured run, which is uploaded like any other).
set -uo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:?usage: ci/nightly-host.sh ARCH OUT_DIR}
OUT=${2:?usage: ci/nightly-host.sh ARCH OUT_DIR}
SWEEPS=${NIGHTLY_SWEEPS:-prefill-vs-sdpa}
PY=${PY:-.venv/bin/python}
STORE="$OUT/store"
mkdir -p "$STORE"
LOG="$OUT/nightly-$ARCH.log"
worst=0
note() { echo "[nightly-$ARCH] $*" | tee -a "$LOG"; }
step() {
  # Keep going after a failure so the other steps still record their runs.
  local rc
  "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    note "step failed with exit $rc: $*"
    if [ "$rc" -eq 75 ] && [ "$worst" -eq 0 ]; then worst=75; elif [ "$rc" -ne 75 ]; then worst=1; fi
  fi
  return 0
}

step make setup
if [ ! -x "$PY" ]; then note "setup did not produce $PY"; exit 1; fi
TETHER="$PY -m tether --store $STORE"
step make verify-held TETHER="$TETHER"
# Every sweep holds the host itself (the guard's record goes into the run). NIGHTLY_SHARDED=1
# splits each sweep across the host's GPUs (tether sweep --shards); sharded and unsharded runs
# trend apart in the docs.
for sweep in $SWEEPS; do
  if [ "${NIGHTLY_SHARDED:-0}" = 1 ]; then
    step $TETHER sweep "$sweep" --shards 0 --shard-dir "$OUT/shards/$sweep" --no-progress
  else
    step $TETHER sweep "$sweep" --no-progress
  fi
done
found=$(find "$STORE" -name '*.json' | wc -l)
note "recorded $found run file(s) in $STORE"
if [ "$found" -eq 0 ]; then
  note "no run recorded at all; the collect job will mark $ARCH not measured"
fi
exit "$worst"
