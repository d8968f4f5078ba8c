#!/usr/bin/env bash
# The guard's refusal path, shown on a real GPU host rather than described: while
# `make verify-<vendor>-held` holds the host, a second guarded command must be refused with
# exit 75 and leave a not_measured record naming the holder in the scratch store.
# Usage: validate/tools/guard_busy_demo.sh [cuda|rocm] [LOG]    (PY=python3 by default)
set -u
PY=${PY:-python3}
vendor=${1:-cuda}
log=${2:-verify.log}
make PY="$PY" "verify-$vendor-held" >"$log" 2>&1 &
verify_pid=$!
for _ in $(seq 1 600); do
  "$PY" -m tether guard status 2>/dev/null | grep -q 'held by' && break
  sleep 0.5
done
"$PY" -m tether guard status
"$PY" -m tether guard --hold --wait 5 -- true
second_rc=$?
echo "second guard: rc=$second_rc (75 means refused: host busy, not measured)"
wait "$verify_pid"
verify_rc=$?
tail -n 3 "$log"
echo "verify: rc=$verify_rc"
[ "$second_rc" -eq 75 ] && [ "$verify_rc" -eq 0 ]
