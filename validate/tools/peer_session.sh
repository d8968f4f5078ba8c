#!/usr/bin/env bash
# The GPU host's FlashInfer, from the slim build carried in .peers/ (no network there), then a
# Python session that uses it: validate/tools/peer_session.py by default, or the script named first.
#
#   bash validate/tools/peer_session.sh                           # build or restore, check, sweeps
#   bash validate/tools/peer_session.sh validate/tools/gluon_session.py # the Gluon kernel's session
#   bash validate/tools/peer_session.sh -m pytest -q -p no:xdist validate/correctness/test_gluon.py
#
# The FlashInfer setup is validate/peer_env.sh (what .peers/ holds is said there).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/peer-out}
mkdir -p "$OUT"
source validate/peer_env.sh
if [ "${1:-}" = "-m" ]; then
  exec python3 "$@"  # a module (pytest) with FlashInfer on the path
fi
script=${1:-validate/tools/peer_session.py}
[ $# -gt 0 ] && shift
exec python3 "$script" "$@"
