#!/usr/bin/env bash
# examples/rmsnorm as an adopting project would run it: installed beside tether, its own tests,
# then `tether sweep` (on the CPU, under the guard), `tether render` and `tether check` in a
# scratch copy, so the committed example stays as it is. Fails if adoption breaks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# The steps below run in a scratch copy: a relative path to the interpreter must not break.
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac
"$PY" -m pip install -q --no-deps -e examples/rmsnorm
"$PY" -m pytest -q -p no:cacheprovider examples/rmsnorm/tests
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r examples/rmsnorm "$work/rmsnorm"
cd "$work/rmsnorm"
export TETHER_GUARD_LOCK="$work/guard.lock" TETHER_GUARD_LOAD_LIMIT=${TETHER_GUARD_LOAD_LIMIT:-1000}
"$PY" -m tether check --quiet
"$PY" -m tether sweep rmsnorm --no-progress
"$PY" -m tether render
"$PY" -m tether check
echo "example: OK"
