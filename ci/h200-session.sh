#!/usr/bin/env bash
# One evidence session on a lent H200 host (.library/device: no network; torch, triton, jinja2
# and pytest preinstalled; the working tree copied, .peers/ carried). The whole session holds
# the guard; every tether verb inside it holds it nested, so each run records the hold.
#
#   OUT=... TETHER_GIT_SHA=$(git rev-parse HEAD) TETHER_GIT_DIRTY=0 bash ci/h200-session.sh PLAN
# (on a lent host through .library/device, ci/h200-call.sh wraps it: tests first, the peer
# modules checked, the runs signed with the carried key).
#
# Two lanes run side by side when the host has two GPUs (one after the other on one GPU):
#   lane 0 (GPU 0): the public API as routed: `tether verify` (the suite, whose run records the
#                   routed cases by arm), then validate/gpu_routed_grid.py, then more runs;
#   lane 1 (GPU 1): the sweeps of PLAN, one after another, each its own guarded run.
# PLAN "api": the public entry points as called and the sm90 policy's evidence, each sweep twice;
# "final": "api", then the policy's routes checked, the gates and the routed-API grid;
# "verify": the suite alone.
# When "api" and the suite do not fit one device call: PLAN "sweeps" measures each sweep once,
# then the second runs of those in ROUND2 (default: all), then the gates (GATE=0: not); SWEEPS
# names a subset (two runs of a sweep must share a commit to give its band); PLAN "verify" with
# ROUND2 set first takes the second runs of ROUND2, then the suite (TUNE=1, in "sweeps" or
# "verify": the Gluon kernel's tuning grid too).
# PLAN "evidence": lane 0 verifies, then tunes, probes and runs the demos; lane 1 measures the
# sweeps the policy cites twice each (two runs give the run-to-run band), the gated calls and
# the peers. PLAN "gates": once the policy and the gates are set from that evidence: the suite
# again on lane 0 (its verify run; validate/gates measures the gates) and `tether compile` of
# sm90 with this host's Triton, `tether gate` on lane 1.
# Every run lands in $OUT/store; $OUT/store.tgz and $OUT/logs.tgz come back (the device keeps
# 8 files at most). A table of step, lane, exit status and seconds is printed last.
# SESSION_S (default 520): seconds after the start by which every step has ended, the rest
# skipped (keep it under the device's per-call limit: packing and signing follow). SWEEPS=none:
# no first runs; ROUND2=none: no second runs. PREBUILD=0: no FlashInfer build before the hold
# (a warm host that built them in the call before still has them in /tmp).
# A 30-minute device budget fits one evidence set in three calls, made back to back so the host
# stays warm (a cold start costs a minute or more and drops /tmp): "sweeps" with ROUND2=none,
# then "sweeps" with SWEEPS=none and the second runs, then "verify" with TUNE=1. It fits only
# with .peers/fi-jit-sm90.tar.xz carried (building its eight modules took over half a call at
# 3e172c2) and compile runs in the store for this commit's kernels and the host's Triton (else
# the suite's compile gates compile every arch on the host: at 3e172c2 the suite then ran past
# the call's deadline). On 2026-12-02 (a head_dim-256 change, at f5ed213 and 9df5ff3) round
# one with TUNE=1 filled most of a call and round two about half of one, and the suite alone
# (14 workers) outlasted what a call had left after them, so "verify" wants a call of its own
# with SESSION_S near the call's limit (the logs' tables give each step's seconds).
# TETHER_GIT_SHA is the full sha of the commit copied, typed as it is where the commit is: a
# copy's .git can name another commit. The working tree travels in 64 MiB at most, with the
# store, .peers/ and .hostkey/ in it (an unpacked ssh-keygen with its libraries put it over):
# the runs that come back are merged into results/ and packed (tether store pack) before they
# are committed, or the store outgrows what a call carries.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder that comes back}
PLAN=${2:-${1:-evidence}}
STORE="$OUT/store"
# Seconds since the epoch by which every step has ended (SESSION_S after the session began).
export DEADLINE=${DEADLINE:-$(($(date +%s) + ${SESSION_S:-520}))}
LOGS="$OUT/logs"
T="python3 -m tether --store $STORE"

step() {  # step LANE NAME TIMEOUT CMD...: run, log, and append a row to the lane's table
  local lane=$1 name=$2 limit=$3 t0 rc left
  shift 3
  t0=$(date +%s)
  left=$((DEADLINE - t0))  # the device's per-command limit: stop short of it, pack what ran
  if [ "$left" -lt 20 ]; then
    printf '%-6s %-28s %4s %5ss\n' "$lane" "$name" skip 0 >>"$LOGS/table.$lane"
    return
  fi
  # SIGINT, not timeout's SIGTERM: pytest interrupted writes its junit xml, so a suite cut off
  # at the deadline records what ran (at 9df5ff3, SIGTERM near the suite's end left 0 passed
  # on record);
  # tether's sweeps stop on either. A step still running 15 s later is killed.
  timeout -s INT -k 15 "$((left < limit ? left : limit))" "$@" >"$LOGS/$lane-$name.log" 2>&1
  rc=$?
  printf '%-6s %-28s %4s %5ss\n' "$lane" "$name" "$rc" "$(($(date +%s) - t0))" >>"$LOGS/table.$lane"
  tail -n 3 "$LOGS/$lane-$name.log" | sed "s/^/[$lane $name] /"
}

# The public entry points as called, and the sm90 policy's evidence: each sweep run twice, in
# separate processes (two runs of one commit are the run-to-run band).
# What the policy and the gates rest on first, then the front page's catalog row, so a session
# cut short loses the least; the routing-regret and paged sweeps (issues 43, 44) last.
API_SWEEPS=${SWEEPS:-"policy-chunked-sm90 policy-square-sm90 policy-square-short-sm90 policy-wide-sm90
  policy-ragged-sm90 gate-calls-api api-models-fa3 api-chunked-fa3 api-square-fa3
  api-square-f16-fa3 api-breadth-fa3 api-ragged-fa3 api-chunked-sdpa api-batch-sdpa
  policy-batch-sm90 policy-batch-short-sm90 api-eager-fa3 api-host-fa3 api-regret-gluon
  api-regret-triton api-regret-cudnn api-paged-fa3"}
[ "${SWEEPS-}" = none ] && API_SWEEPS=""
# A sweep step's limit: a sweep that first launches a Gluon variant on a fresh host compiles it
# inside its step (at 6d1b213 the first policy-wide-sm90 run, head_dim 96 and 256, was cut off
# at the old limit: results/ keeps it, rejected).
SWEEP_S=${SWEEP_S:-180}
# A first run's limit: it compiles every Gluon and Triton variant its cells launch (on
# 2026-12-07 the first run of policy-ragged-sm90's 56-cell design, seven layouts each its own
# compile, was cut at SWEEP_S and left no run; its second run fit well inside). The second
# runs find the variants compiled and keep SWEEP_S.
SWEEP1_S=${SWEEP1_S:-300}
# The second runs, one list for every plan: ROUND2's sweeps; none for "none"; unset, every
# first-run sweep in "sweeps" and none in "verify".
case "${ROUND2-}" in
  none) SECOND="" ;;
  "") SECOND=$([ "$PLAN" = sweeps ] && echo "$API_SWEEPS") ;;
  *) SECOND=$ROUND2 ;;
esac

lane0() {  # the public API as routed (the suite, recorded; the issue's wider grid), then more
  export CUDA_VISIBLE_DEVICES=$1
  local s="$T sweep --no-progress --wait 30"
  if [ "$PLAN" = api ] || [ "$PLAN" = final ]; then
    return
  fi
  if [ "$PLAN" = sweeps ]; then
    if [ -n "${TUNE-}" ]; then
      # The Gluon kernel's variants against the fastest peer, after the sweeps (one GPU).
      step lane0 tune-gluon-sm90 90 $T tune --no-progress --wait 30 tune-gluon-sm90
    fi
    return
  fi
  if [ "$PLAN" = verify ]; then
    if [ -n "${TUNE-}" ]; then
      # The Gluon kernel's variants against the fastest peer (kernels/NOTES.md renders it).
      step lane0 tune-gluon-sm90 90 $T tune --no-progress --wait 30 tune-gluon-sm90
    fi
    if [ -n "$SECOND" ]; then
      for name in $SECOND; do
        step lane0 "$name.2" "$SWEEP_S" $s "$name"
      done
    fi
    # The suite, with the rest of the session: at ff35828 a 420 s step cut it off before
    # pytest reported (a rejected run, no junit xml); its compile-gate tests compile every
    # arch's variants. The gates and the routed grid run in the "final" plan.
    step lane0 verify 590 $T verify --vendor cuda --workers 14 --wait 30
    return
  fi
  step lane0 verify 420 $T verify --vendor cuda --workers 12 --wait 30
  if [ "$PLAN" = gates ]; then
    # sm90's compile evidence from the compiler that runs here (the CPU host's may differ).
    step lane0 compile-sm90 120 $T compile --arch sm90
    return
  fi
  step lane0 routed-grid 120 env OUT="$LOGS" python3 -m validate.gpu_routed_grid --jobs 14
  step lane0 tune-gluon-sm90 90 $T tune --no-progress --wait 30 tune-gluon-sm90
  step lane0 probe 60 $T probe --no-progress --wait 30 chunked-prefill-bound
  step lane0 deferred-rescale 60 $s deferred-rescale
  step lane0 aa-control-demo 40 $s aa-control-demo
  step lane0 aa-release-demo 40 $s aa-release-demo
}

lane1() {  # the sweeps the policy cites, twice each (two runs: the run-to-run band), and peers
  export CUDA_VISIBLE_DEVICES=$1
  local s="$T sweep --no-progress --wait 30"
  if [ "$PLAN" = verify ]; then
    return
  fi
  if [ "$PLAN" = sweeps ]; then
    for name in $API_SWEEPS; do
      step lane1 "$name.1" "$SWEEP1_S" $s "$name"
    done
    for name in $SECOND; do
      step lane1 "$name.2" "$SWEEP_S" $s "$name"
    done
    if [ "${GATE:-1}" = 1 ]; then
      step lane1 gate 100 $T gate --no-progress --wait 30
    fi
    return
  fi
  if [ "$PLAN" = api ] || [ "$PLAN" = final ]; then
    for round in 1 2; do
      for name in $API_SWEEPS; do
        step lane1 "$name.$round" 120 $s "$name"
      done
    done
    if [ "$PLAN" = final ]; then
      # The public API as routed, checked against the reference on this GPU: the issue 11
      # grid and the suite's (every arm route picks, the policy scopes' own calls, every
      # head_dim, LSE, strides).
      step lane1 gate 100 $T gate --no-progress --wait 30
      step lane1 routed-grid 150 env OUT="$LOGS" python3 -m validate.gpu_routed_grid --jobs 14 \
        --every "${GRID_EVERY:-1}"
    fi
    return
  fi
  if [ "$PLAN" = gates ]; then
    step lane1 gate 150 $T gate --no-progress --wait 30
    return
  fi
  step lane1 prefill-vs-sdpa.1 170 $s prefill-vs-sdpa
  step lane1 chunked-prefill.1 80 $s chunked-prefill
  step lane1 gate-calls-sm90 100 $s gate-calls-sm90
  step lane1 prefill-vs-sdpa.2 170 $s prefill-vs-sdpa
  step lane1 chunked-prefill.2 80 $s chunked-prefill
  step lane1 square-prefill-fa3 100 $s square-prefill-fa3 --cap-s 2
  step lane1 chunked-prefill-fa3 100 $s chunked-prefill-fa3 --cap-s 2
}

if [ "${1:-}" = --held ]; then  # inside the hold
  gpus=$(nvidia-smi -L | grep -c '^GPU ')
  last=$((gpus > 1 ? 1 : 0))
  if [ "$gpus" -gt 1 ]; then
    lane0 0 &
    lane1 "$last" &
    wait
  else
    lane1 0
    lane0 0
  fi
  exit 0
fi

# The commit the runs will name comes from the machine that holds it, never from this copy's
# .git: a lent host's copy can keep an older .git (at 72d3249 a stamp computed here named
# 86c2d70, and five runs of new code recorded the old commit; tether check now refuses such a
# run). Refuse a stamp whose commit this .git knows and whose tree is not this one.
if [ -z "${TETHER_GIT_SHA:-}" ]; then
  echo "h200-session: set TETHER_GIT_SHA (git rev-parse HEAD, where the commit is)" >&2
  exit 2
fi
if git cat-file -e "$TETHER_GIT_SHA^{commit}" 2>/dev/null &&
  ! git diff --quiet "$TETHER_GIT_SHA" -- . ':(exclude)results' 2>/dev/null; then
  echo "h200-session: TETHER_GIT_SHA=$TETHER_GIT_SHA names a commit whose tree is not this" \
    "copy's; stamp the commit that was copied" >&2
  exit 2
fi
mkdir -p "$STORE" "$LOGS"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOGS/pip.log" 2>&1 ||
  { tail "$LOGS/pip.log"; exit 1; }
source validate/peer_env.sh 2>>"$LOGS/peer_env.log"
# FlashInfer's modules, built before the hold (PREBUILD=0: not): a guarded step that JIT-builds
# one spends most of its time limit compiling (as at 690a884; an archive carried in .peers/
# spares it). What is built comes back as $OUT/fi-jit-sm90.tar.xz
# (or its parts): copy it into .peers/ for the next session. validate/tools/peer_build_cpu.sh
# builds the same archive on a CPU host with the device's nvcc, at no device time.
if [ "${PREBUILD:-1}" = 1 ] && python3 -c 'import flashinfer' 2>/dev/null; then
  # Its limit leaves room for a cold build with the head_dim 256 modules, which on 2026-12-02
  # came close to the 360 s limit before it.
  step pre prebuild-flashinfer 480 env OUT="$OUT" python3 validate/tools/peer_session.py --build-only
fi
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv >"$LOGS/smi-before.csv" 2>&1
python3 -m tether guard --hold --wait 120 -- bash ci/h200-session.sh --held "$PLAN"
held=$?
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv \
  >"$LOGS/smi-after.csv" 2>&1
found=$(find "$STORE" -name '*.json' | wc -l)
# Sign every run measured here with this host's key, when the session carries one (.hostkey/,
# never committed): the SSH signature git uses for commits, namespace tether-run, over each
# run's digest. The signatures come back beside the runs.
if [ -f .hostkey/h200_host_key ] && command -v ssh-keygen >/dev/null; then
  chmod 600 .hostkey/h200_host_key
  for f in $(find "$STORE" -name '*.json'); do
    python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["digest"])' "$f" \
      >"$f.digest" && ssh-keygen -Y sign -q -f .hostkey/h200_host_key -n tether-run "$f.digest" \
      && mv "$f.digest.sig" "${f%.json}.sig"
    rm -f "$f.digest"
  done
  echo "signed $(find "$STORE" -name '*.sig' | wc -l) runs with .hostkey/h200_host_key"
else
  echo "runs not signed: no .hostkey/ carried or no ssh-keygen here"
fi
tar czf "$OUT/store.tgz" -C "$OUT" store && rm -rf "$STORE"
cp "$LOGS"/routed_grid.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$OUT" logs
echo "guard hold exit $held; $found run file(s) in store.tgz"
printf '%-6s %-28s %4s %6s\n' lane step rc time
cat "$LOGS"/table.* 2>/dev/null
rm -rf "$LOGS"
