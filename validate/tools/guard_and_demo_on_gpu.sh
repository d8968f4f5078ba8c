#!/usr/bin/env bash
# The demo and the guard on a real GPU host (issue 16's checks): the demo stays out of the committed store and prints no profiler
# noise, the guard's status codes, and a borrowed hold refused. Nothing here writes results/.
# Usage: OUT=/some/folder validate/tools/guard_and_demo_on_gpu.sh   (PY=.venv/bin/python by default)
# Ends with a table (check, expected, got, ok) and exits 1 if any row is not ok; the logs are
# under $OUT.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:?set OUT to a folder for the logs}
mkdir -p "$OUT"
T="$PY -m tether"
rows=()
bad=0
row() {  # row NAME EXPECTED GOT
  local ok=yes
  [ "$2" = "$3" ] || { ok=NO; bad=1; }
  rows+=("$(printf '%-44s %-10s %-10s %s' "$1" "$2" "$3" "$ok")")
}

before=$(git status --porcelain -- results | wc -l)
$T guard status --json >"$OUT/status-free.json" 2>"$OUT/status-free.err"
row "guard status, nobody holding (0 free)" 0 $?

$T guard --hold -- $T guard status >"$OUT/status-held.txt" 2>&1
row "guard status inside a hold (75 held)" 75 $?

# a second process that copies the variable the guard gives its command must not get in
$T guard --hold -- sleep 20 >"$OUT/holder.log" 2>&1 &
holder=$!
sleep 3
lock=$($PY -c 'from tether.guard.lock import default_lock_path; print(default_lock_path())')
TETHER_GUARD_HELD="$lock:$holder" $T guard --hold --wait 2 -- true >"$OUT/borrow.log" 2>&1
row "borrowed TETHER_GUARD_HELD refused (75)" 75 $?
wait "$holder"

$T demo >"$OUT/demo.out" 2>"$OUT/demo.err"
row "tether demo on the GPU host (0)" 0 $?
row "USDT lines in the demo's stderr" 0 "$(grep -c USDT "$OUT/demo.err")"
row "demo summary names the A/A floor" 1 "$(grep -c '^  geomean ratio .*A/A floor' "$OUT/demo.out")"
after=$(git status --porcelain -- results | wc -l)
row "files changed under results/ by all this" "$before" "$after"

$T store validate >"$OUT/validate.out" 2>&1
row "store validate of results/ (0)" 0 $?

printf '%-44s %-10s %-10s %s\n' check expected got ok
printf '%s\n' "${rows[@]}"
exit "$bad"
