#!/usr/bin/env bash
# Merge every host's downloaded run files into the store, then render and check.
# Usage: ci/collect.sh ARTIFACTS_DIR [ARCH,ARCH,...]
# ARTIFACTS_DIR holds one folder per host job; the arch list names the hosts the nightly
# expected, so one that sent nothing is recorded as not measured rather than left out.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ARTIFACTS=${1:?usage: ci/collect.sh ARTIFACTS_DIR [ARCH,...]}
EXPECT=${2:-${NIGHTLY_ARCHES:-}}
exec "$PY" ci/collect.py "$ARTIFACTS" --root . --expect "$EXPECT"
