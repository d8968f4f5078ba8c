#!/usr/bin/env bash
# Merge every host's downloaded run files into the store, then render and check.
# Usage: ci/collect.sh ARTIFACTS_DIR [ARCH,ARCH,...]
# ARTIFACTS_DIR holds one folder per host job; the arch list names the hosts the nightly
# expected, so one that sent nothing is recorded as not measured rather than left out.
# TETHER_ROOT / TETHER_STORE override the project and the store (tests point them at tmp).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PY:-$HERE/.venv/bin/python}
ARTIFACTS=${1:?usage: ci/collect.sh ARTIFACTS_DIR [ARCH,...]}
EXPECT=${2:-${NIGHTLY_ARCHES:-}}
ROOT=${TETHER_ROOT:-$HERE}
STORE=${TETHER_STORE:-$ROOT/results}
exec "$PY" -m tether --root "$ROOT" --store "$STORE" collect "$ARTIFACTS" --expect "$EXPECT" ${COLLECT_FLAGS:-}
