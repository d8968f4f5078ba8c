#!/usr/bin/env bash
# The sm90 Gluon kernel's compile gate under every Triton release it is declared for
# (tether_kernels.gluon.launch.GLUON_TRITON) besides the one the suite ran under: each release's
# wheel is installed (no deps) into .venv-triton/<version>/, put ahead of the venv's own Triton
# on PYTHONPATH, and validate/tools/gluon_aot.py compiles every case ahead of time (no GPU):
# spills, registers, shared memory, wgmma and TMA in the steady loops and their instruction mix,
# written to .venv-triton/<version>.json, printed as one table row per release.
#
#   bash validate/tools/compile_releases.sh [VERSION ...]     # default: the declared releases
#
# Exit 1 when a release fails the gate (a case that does not compile, spills, or lacks wgmma or
# TMA in its loops). Needs pip access to the wheels (CI and the CPU host have it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
# The newest patch of each declared minor release (the one pip gives for triton==X.Y.*).
declared=$("$PY" -c 'from tether_kernels.gluon.launch import GLUON_TRITON as r; print(*r)')
installed=$("$PY" -c 'from importlib.metadata import version; print(version("triton"))')
if [ $# -gt 0 ]; then versions=("$@"); else
  versions=()
  for rel in $declared; do
    [ "${installed%.*}" = "$rel" ] && continue  # the suite's own test compiled this one
    versions+=("$rel.*")
  done
fi
mkdir -p .venv-triton
rc=0
table=()
for spec in "${versions[@]}"; do
  dir=.venv-triton/${spec//\*/x}
  if [ ! -d "$dir/triton" ]; then
    "$PY" -m pip install -q --no-deps --target "$dir" "triton==$spec" 2>&1 | grep -v '^WARNING: Location' || true
  fi
  ver=$(PYTHONPATH=$dir "$PY" -c 'from importlib.metadata import version; print(version("triton"))')
  t0=$(date +%s)
  set +e
  env -u TRITON_INTERPRET PYTHONPATH="$dir" "$PY" validate/tools/gluon_aot.py \
    --json ".venv-triton/$ver.json" --workers "${WORKERS:-2}" >".venv-triton/$ver.log" 2>&1
  r=$?
  set -e
  [ "$r" = 0 ] || { rc=1; tail -5 ".venv-triton/$ver.log" >&2; }
  table+=("$(printf '%-8s %-4s %5ss %s' "$ver" "$([ "$r" = 0 ] && echo ok || echo FAIL)" \
    "$(($(date +%s) - t0))" "$("$PY" - ".venv-triton/$ver.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("no rows"); sys.exit()
loops = [r.get("loops", {}) for r in rows]
print(f"{len(rows)} cases, max regs {max((r.get('registers') or 0) for r in rows)}, "
      f"spill {sum((r.get('spill_bytes') or 0) for r in rows)} B, "
      f"main-loop HGMMA {sorted({l.get('main', {}).get('mix', {}).get('HGMMA', 0) for l in loops})}, "
      f"producer UTMALDG {sorted({l.get('producer', {}).get('mix', {}).get('UTMALDG', 0) for l in loops})}")
PY
)")")
done
printf 'triton   gate  time  cases\n'
printf '%s\n' "${table[@]}"
exit $rc
