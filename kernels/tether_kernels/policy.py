"""The routing policy: the thresholds from which an entry point takes tether's own kernel.

Data the check judges against the store (``[tool.tether] policy`` lists this file beside
gates.py), pure dataclasses, no torch: ``tether check`` and the renderer read POLICY on
machines without a GPU. The regions between ``BEGIN GENERATED`` / ``END GENERATED`` are written
by ``tether render`` from the results store; never edit them by hand.
"""

from __future__ import annotations

from tether.policy import Evidence, Population, Threshold

from tether_kernels.archs import OWN_ARM, PER_REQUEST, check_arch

_GATE_POPULATION = Population(
    name="single-prefill-gate",
    entry="single_prefill",
    where=(("qo_len", ">=", 2048),),
)
_EVIDENCE = Evidence(
    sweep="prefill-vs-sdpa",
    population=_GATE_POPULATION,
    predicates=("geomean_win", "no_loss_outside_floor"),
)


def _takes(min_qo_len: int | None) -> tuple[tuple[str, str, object], ...] | None:
    """single_prefill takes the arm from ``min_qo_len`` queries on; None: never (not set)."""
    return None if min_qo_len is None else (("qo_len", ">=", min_qo_len),)


def _threshold(
    arch: str,
    otherwise: str,
    min_qo_len: int | None,
    *,
    region: str | None = None,
    evidence: Evidence = _EVIDENCE,
    scope: tuple[tuple[str, str, object], ...] = (),
) -> Threshold:
    """single_prefill on ``arch`` takes tether's own kernel from ``min_qo_len`` queries on
    (None: not set), where ``scope`` holds; else ``otherwise``."""
    return Threshold(
        region=region or f"policy-single-prefill-{arch}",
        arch=arch,
        entry="single_prefill",
        arm=OWN_ARM.get(arch, "triton"),
        otherwise=otherwise,
        evidence=evidence,
        takes=_takes(min_qo_len),
        scope=scope,
    )


_CHUNKED_EVIDENCE = Evidence(
    sweep="chunked-prefill",
    population=Population(
        name="single-prefill-chunked",
        entry="single_prefill",
        where=(("qo_len", ">=", 2048), ("kv_len", ">", "qo_len")),
    ),
    predicates=("geomean_win", "no_loss_outside_floor"),
)


def _chunked_threshold(arch: str, otherwise: str, min_qo_len: int | None) -> Threshold:
    """A threshold for chunked prefill only (kv_len > qo_len): square shapes are not its call."""
    return _threshold(
        arch,
        otherwise,
        min_qo_len,
        region=f"policy-{arch}-single-prefill-chunked",
        evidence=_CHUNKED_EVIDENCE,
        scope=(("kv_len", ">", "qo_len"),),
    )


# sm90: tether's kernels where the evidence measured them against the arm a call would
# otherwise take (cuDNN, through the same per-call path), and only there: the Gluon kernel for
# chunked calls and long squares, the Triton kernel for short squares (its evidence region
# below; its short-call launch config takes 64-row tiles), and the Gluon kernel for causal
# calls at head_dim 96 and 256 (against the Triton kernel, which takes them otherwise).
# Each scope states what the kernel is, not the cells measured: the dtypes and head_dims it is
# instantiated for, and the head layouts it serves as ranges (SM90_LAYOUTS). Its evidence is a
# designed sample spanning those ranges (tether_kernels_plugin.sweeps.LAYOUT_DESIGN: each end
# and a spread inside, the model catalog's awkward groups 28/4 and 64/8 among them), and the
# check holds every range spanned and every named value combination measured. Calls outside
# every scope take the route order (cuDNN, then the Triton kernel, then PyTorch's math backend).
_SM90_HEADS = (("head_dim", "==", 128), ("hq", "==", 32), ("hkv", "==", 8))
_SM90_HALF = (("dtype", "in", ("f16", "bf16")),)
# The layouts the Gluon and Triton kernels serve on sm90: a GQA group (query heads per KV
# head, GROUP in the kernels) of 1 (MHA) to 16 and up to 128 query heads, which hold every
# per-GPU layout of the model catalog (kernels/models.toml at TP 1 to 8) but none wider.
SM90_LAYOUTS = (("hq//hkv", "within", (1, 16)), ("hq", "within", (1, 128)))
# Long causal squares, three scopes, each set where the H100 runs of 9eba023 (2026-12-06, both
# in the store: policy-square-sm90 at 2048, 4096 and 16384 queries) put the kernel against
# cuDNN: head_dim 128 from one query head to 32 (a serving engine's TP-8 shards of the
# catalog's models have 2 to 7); head_dim 64 from 8, as that run's single-head cells at 64 did
# not clear the floor; and squares of 40 to 128 query heads in groups of 4 to 16 (the catalog's
# 40/8 to 128/8), at head_dim 128, from 8192 queries, a length the sweep adds to judge them,
# between the two lengths where that run's 64/8 and 128/8 cells went each way. MHA of more than
# 32 heads keeps the route order (128/128 in that run). The sweep times the design's other
# cells too, so the store shows why each scope stops where it does; the regions below render
# each scope's evidence.
SM90_SQUARE_LAYOUTS = (("hq//hkv", "within", (1, 16)), ("hq", "within", (1, 32)))
SM90_SQUARE64_LAYOUTS = (("hq//hkv", "within", (1, 16)), ("hq", "within", (8, 32)))
SM90_SQUARE_HEADS_LAYOUTS = (("hq//hkv", "within", (4, 16)), ("hq", "within", (40, 128)))
SM90_SQUARE_HEADS_MIN_QO = 8192
SM90_SHORT_LAYOUTS = (("hq//hkv", "within", (1, 16)), ("hq", "within", (1, 32)))
# Ragged batches of GQA groups of 2 to 16 and 4 to 64 query heads, new prompts and serving
# steps alike (one-token rows, chunks over a cached prefix). The scope stopped at 16 to 32
# heads and 256-query requests, where its sweep's design did, and per_request (a launch per
# request) took everything else; a diagnostic on the H100 (validate/tools/ragged_session.py on
# branch ragged-persistent, 2026-12-07: 128-query requests, 8/1 and 64/8) had the one launch
# ahead of it there, a run for reading, not evidence. The evidence is policy-ragged-sm90's
# designed sample, rendered below: each range's ends and layouts inside. MHA (group 1) keeps per_request: at 32/32 head
# dim 128 and 4096 the one launch lost to it in both H100 runs of 2026-12-07, and at 1/1 and
# 128/128 it held no floor against it in both runs of 2026-12-06.
SM90_RAGGED_LAYOUTS = (("hq//hkv", "within", (2, 16)), ("hq", "within", (4, 64)))


def _sm90_evidence(
    sweep: str, entry: str, where: tuple[tuple[str, str, object], ...], name: str = ""
) -> Evidence:
    """A threshold's evidence: ``sweep``'s cells where ``where`` holds (population ``name``,
    by default the sweep's region: two thresholds judged on one sweep name theirs apart)."""
    return Evidence(
        sweep=sweep,
        population=Population(name=name or f"{sweep}-region", entry=entry, where=where),
        predicates=("geomean_win", "no_loss_outside_floor"),
    )


_SM90_CHUNKED_SCOPE = (
    ("causal", "==", True),
    ("kv_len", ">", "qo_len"),
    *_SM90_HALF,
    ("head_dim", "in", (64, 128)),
    *SM90_LAYOUTS,
)
# Causal squares: the long ones' and the short ones' scopes differ only in the head_dims their
# evidence covers and the short ones' upper bound.
_SM90_SQUARE = (("causal", "==", True), ("kv_len", "==", "qo_len"), *_SM90_HALF)
_SM90_SQUARE_SCOPE = (*_SM90_SQUARE, *SM90_SQUARE_LAYOUTS, ("head_dim", "==", 128))
_SM90_SQUARE64_SCOPE = (*_SM90_SQUARE, *SM90_SQUARE64_LAYOUTS, ("head_dim", "==", 64))
_SM90_SQUARE_HEADS_SCOPE = (*_SM90_SQUARE, *SM90_SQUARE_HEADS_LAYOUTS, ("head_dim", "==", 128))
_SM90_SQUARE_SHORT_SCOPE = (
    *_SM90_SQUARE,
    *SM90_SHORT_LAYOUTS,
    ("head_dim", "==", 128),
    # Below the Gluon threshold's region: the two never both take a call.
    ("qo_len", "<", 2048),
)
# Causal calls at head_dim 96 and 256, chunked and square: cuDNN is declared here only for the
# head_dims run on the H200 (arms._GPU_SDPA_DIMS), so the arm they otherwise take is the Triton
# kernel. Two scopes, one per head_dim: at 96 (a 128-wide tile padded from 96) the Gluon
# kernel's scope stops at 64 query heads, as its MHA cells at 128/128 held no floor against the
# Triton kernel in the runs of b88e241 (policy-wide-sm90, 2026-12-06); those calls keep the
# Triton kernel, and the sweep still times them, so the store shows why. The catalog's head_dim
# 96 layouts (Phi-3's 32/32 and its TP shards) are inside.
SM90_WIDE96_LAYOUTS = (("hq//hkv", "within", (1, 16)), ("hq", "within", (1, 64)))
_SM90_WIDE_CALLS = (("causal", "==", True), *_SM90_HALF)
_SM90_WIDE_SCOPE = (*_SM90_WIDE_CALLS, ("head_dim", "==", 256), *SM90_LAYOUTS)
_SM90_WIDE96_SCOPE = (*_SM90_WIDE_CALLS, ("head_dim", "==", 96), *SM90_WIDE96_LAYOUTS)
# ragged_prefill (requests of their own lengths, packed): the Gluon kernel's ragged launch (one
# launch for the batch) against per_request, which runs each request as single_prefill would
# (one launch each, every request routed by the thresholds above). The thresholds read the
# batch's envelope: its batch and its longest request; the evidence's batches are new prompts
# spread up to the longest and serving steps (one-token rows, chunks over a cached prefix,
# prompts), so no request's queries outnumber its keys (kv_len >= qo_len).
_SM90_RAGGED_SCOPE = (
    ("causal", "==", True),
    ("kv_len", ">=", "qo_len"),
    *_SM90_HALF,
    ("head_dim", "in", (64, 128)),
    *SM90_RAGGED_LAYOUTS,
)
_SM90_BATCH_SCOPE = (
    ("causal", "==", True),
    ("kv_len", "==", "qo_len"),
    ("dtype", "==", "bf16"),
    *_SM90_HEADS,
)
# BEGIN GENERATED: policy-sm90-single-prefill-chunked (tether render)
# Evidence for sm90 single_prefill -> gluon (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len > qo_len
#   dtype in (f16 or bf16)
#   head_dim in (64 or 128)
#   hq//hkv within 1 to 16
#   hq within 1 to 128
#   qo_len >= 16
# sweep policy-chunked-sm90, population policy-chunked-sm90-region
# (reachable from single_prefill, qo_len >= 16, kv_len > qo_len).
# run 20261207T093330Z-sweep-policy-chunked-sm90-sm90-0cecaf78a6a6
# (2026-12-07, git 3b5453385ca6, 1 blocks, 1 replicate runs)
# 96 cells, geomean 3.174,
# noise 0.984-1.016 (A/A floor 0.998-1.002
# times replicate band 0.986-1.014): faster;
# cells 96 faster, 0 slower, 0 level;
# worst cell head_dim=128 hq/hkv/dtype=128/128/bf16 kv_len=32768 qo_len=16
# at 1.110.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-chunked
_SM90_CHUNKED = Threshold(
    region="policy-sm90-single-prefill-chunked",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence(
        "policy-chunked-sm90", "single_prefill", (("qo_len", ">=", 16), ("kv_len", ">", "qo_len"))
    ),
    # From 16 queries: a tiny chunk (a decode-like step of a serving engine) is where cuDNN is
    # furthest behind, not a call to leave to it.
    takes=(("qo_len", ">=", 16),),
    scope=_SM90_CHUNKED_SCOPE,
)
# BEGIN GENERATED: policy-single-prefill-sm90 (tether render)
# Evidence for sm90 single_prefill -> gluon (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   hq//hkv within 1 to 16
#   hq within 1 to 32
#   head_dim == 128
#   qo_len >= 2048
# sweep policy-square-sm90, population policy-square-sm90-region
# (reachable from single_prefill, qo_len >= 2048, head_dim == 128, hq//hkv within 1 to 16, hq
# within 1 to 32).
# run 20261207T162820Z-sweep-policy-square-sm90-sm90-8e5598bbebc9
# (2026-12-07, git 0b066c853812, 1 blocks, 1 replicate runs)
# 32 cells, geomean 1.299,
# noise 0.989-1.011 (A/A floor 0.996-1.004
# times replicate band 0.993-1.007): faster;
# cells 32 faster, 0 slower, 0 level;
# worst cell head_dim=128 hq/hkv/dtype=1/1/f16 seqlen=16384
# at 1.075.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-single-prefill-sm90
_SM90 = Threshold(
    region="policy-single-prefill-sm90",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence(
        "policy-square-sm90",
        "single_prefill",
        (("qo_len", ">=", 2048), ("head_dim", "==", 128), *SM90_SQUARE_LAYOUTS),
    ),
    takes=(("qo_len", ">=", 2048),),
    scope=_SM90_SQUARE_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-square-64 (tether render)
# Evidence for sm90 single_prefill -> gluon (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   hq//hkv within 1 to 16
#   hq within 8 to 32
#   head_dim == 64
#   qo_len >= 2048
# sweep policy-square-sm90, population policy-square-sm90-d64
# (reachable from single_prefill, qo_len >= 2048, head_dim == 64, hq//hkv within 1 to 16, hq
# within 8 to 32).
# run 20261207T162820Z-sweep-policy-square-sm90-sm90-8e5598bbebc9
# (2026-12-07, git 0b066c853812, 1 blocks, 1 replicate runs)
# 24 cells, geomean 1.078,
# noise 0.996-1.004 (A/A floor 0.998-1.002
# times replicate band 0.998-1.002): faster;
# cells 23 faster, 0 slower, 1 level;
# worst cell head_dim=64 hq/hkv/dtype=32/8/bf16 seqlen=16384
# at 1.004.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-square-64
_SM90_SQUARE64 = Threshold(
    region="policy-sm90-single-prefill-square-64",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence(
        "policy-square-sm90",
        "single_prefill",
        (("qo_len", ">=", 2048), ("head_dim", "==", 64), *SM90_SQUARE64_LAYOUTS),
        "policy-square-sm90-d64",
    ),
    takes=(("qo_len", ">=", 2048),),
    scope=_SM90_SQUARE64_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-square-heads (tether render)
# Evidence for sm90 single_prefill -> gluon (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   hq//hkv within 4 to 16
#   hq within 40 to 128
#   head_dim == 128
#   qo_len >= 8192
# sweep policy-square-sm90, population policy-square-sm90-heads
# (reachable from single_prefill, qo_len >= 8192, head_dim == 128, hq//hkv within 4 to 16, hq
# within 40 to 128).
# run 20261207T162820Z-sweep-policy-square-sm90-sm90-8e5598bbebc9
# (2026-12-07, git 0b066c853812, 1 blocks, 1 replicate runs)
# 8 cells, geomean 1.078,
# noise 0.991-1.009 (A/A floor 0.996-1.004
# times replicate band 0.994-1.006): faster;
# cells 8 faster, 0 slower, 0 level;
# worst cell head_dim=128 hq/hkv/dtype=128/8/f16 seqlen=8192
# at 1.056.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-square-heads
_SM90_SQUARE_HEADS = Threshold(
    region="policy-sm90-single-prefill-square-heads",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence(
        "policy-square-sm90",
        "single_prefill",
        (
            ("qo_len", ">=", SM90_SQUARE_HEADS_MIN_QO),
            ("head_dim", "==", 128),
            *SM90_SQUARE_HEADS_LAYOUTS,
        ),
        "policy-square-sm90-heads",
    ),
    takes=(("qo_len", ">=", SM90_SQUARE_HEADS_MIN_QO),),
    scope=_SM90_SQUARE_HEADS_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-square-short (tether render)
# Evidence for sm90 single_prefill -> triton (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   hq//hkv within 1 to 16
#   hq within 1 to 32
#   head_dim == 128
#   qo_len < 2048
#   qo_len >= 128
# sweep policy-square-short-sm90, population policy-square-short-sm90-region
# (reachable from single_prefill, qo_len >= 128, qo_len < 2048, hq//hkv within 1 to 16, hq within
# 1 to 32).
# run 20261206T201722Z-sweep-policy-square-short-sm90-sm90-48993398a074
# (2026-12-06, git b88e241d15bc, 1 blocks, 1 replicate runs)
# 24 cells, geomean 1.333,
# noise 0.973-1.028 (A/A floor 0.986-1.014
# times replicate band 0.986-1.014): faster;
# cells 24 faster, 0 slower, 0 level;
# worst cell hq/hkv/dtype=16/1/bf16 seqlen=1024
# at 1.084.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-square-short
_SM90_SQUARE_SHORT = Threshold(
    region="policy-sm90-single-prefill-square-short",
    arch="sm90",
    entry="single_prefill",
    arm="triton",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence(
        "policy-square-short-sm90",
        "single_prefill",
        (("qo_len", ">=", 128), ("qo_len", "<", 2048), *SM90_SHORT_LAYOUTS),
    ),
    takes=(("qo_len", ">=", 128),),
    scope=_SM90_SQUARE_SHORT_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-wide (tether render)
# Evidence for sm90 single_prefill -> gluon (else triton)
# where:
#   causal == True
#   dtype in (f16 or bf16)
#   head_dim == 256
#   hq//hkv within 1 to 16
#   hq within 1 to 128
#   qo_len >= 16
# sweep policy-wide-sm90, population policy-wide-sm90-d256
# (reachable from single_prefill, qo_len >= 16, head_dim == 256).
# run 20261206T201623Z-sweep-policy-wide-sm90-sm90-1049a16111ba
# (2026-12-06, git b88e241d15bc, 1 blocks, 1 replicate runs)
# 36 cells, geomean 5.448,
# noise 0.990-1.010 (A/A floor 0.997-1.003
# times replicate band 0.993-1.007): faster;
# cells 36 faster, 0 slower, 0 level;
# worst cell head_dim=256 hq/hkv/dtype=128/128/bf16 qo_len/kv_len=16/16384
# at 2.222.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-wide
_SM90_WIDE = Threshold(
    region="policy-sm90-single-prefill-wide",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="triton",
    evidence=_sm90_evidence(
        "policy-wide-sm90",
        "single_prefill",
        (("qo_len", ">=", 16), ("head_dim", "==", 256)),
        "policy-wide-sm90-d256",
    ),
    takes=(("qo_len", ">=", 16),),
    scope=_SM90_WIDE_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-wide-96 (tether render)
# Evidence for sm90 single_prefill -> gluon (else triton)
# where:
#   causal == True
#   dtype in (f16 or bf16)
#   head_dim == 96
#   hq//hkv within 1 to 16
#   hq within 1 to 64
#   qo_len >= 16
# sweep policy-wide-sm90, population policy-wide-sm90-d96
# (reachable from single_prefill, qo_len >= 16, head_dim == 96, hq//hkv within 1 to 16, hq within
# 1 to 64).
# run 20261206T201623Z-sweep-policy-wide-sm90-sm90-1049a16111ba
# (2026-12-06, git b88e241d15bc, 1 blocks, 1 replicate runs)
# 27 cells, geomean 2.411,
# noise 0.984-1.016 (A/A floor 0.998-1.002
# times replicate band 0.986-1.014): faster;
# cells 27 faster, 0 slower, 0 level;
# worst cell head_dim=96 hq/hkv/dtype=8/1/bf16 qo_len/kv_len=2048/2048
# at 1.263.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-wide-96
_SM90_WIDE_96 = Threshold(
    region="policy-sm90-single-prefill-wide-96",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="triton",
    evidence=_sm90_evidence(
        "policy-wide-sm90",
        "single_prefill",
        (("qo_len", ">=", 16), ("head_dim", "==", 96), *SM90_WIDE96_LAYOUTS),
        "policy-wide-sm90-d96",
    ),
    takes=(("qo_len", ">=", 16),),
    scope=_SM90_WIDE96_SCOPE,
)
# BEGIN GENERATED: policy-sm90-batch-prefill (tether render)
# Evidence for sm90 batch_prefill -> gluon (else sdpa_cudnn)
# where:
#   not set
# sweep policy-batch-sm90, population policy-batch-sm90-region
# (reachable from batch_prefill).
# run 20261203T151638Z-sweep-policy-batch-sm90-sm90-2767128c67a5
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# stale: changed since the run: kernels/tether_kernels/gluon/__init__.py
# stale: changed since the run: kernels/tether_kernels/gluon/attn_fwd_sm90.py
# stale: changed since the run: kernels/tether_kernels/gluon/compat.py
# stale: changed since the run: kernels/tether_kernels/gluon/launch.py
# 8 cells, geomean 0.920,
# noise 0.995-1.005 (A/A floor 0.997-1.003
# times replicate band 0.997-1.003): slower;
# cells 1 faster, 4 slower, 3 level;
# worst cell batch=16 seqlen=1024
# at 0.775.
# geomean_win: does not hold
# no_loss_outside_floor: does not hold
# END GENERATED: policy-sm90-batch-prefill
_SM90_BATCH = Threshold(
    region="policy-sm90-batch-prefill",
    arch="sm90",
    entry="batch_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence("policy-batch-sm90", "batch_prefill", ()),
    # Not set: the sweep's cells have Gluon below cuDNN at batch 2 to 16 (the region above
    # renders them), so batch_prefill keeps the route order.
    takes=None,
    scope=_SM90_BATCH_SCOPE,
)
# BEGIN GENERATED: policy-sm90-ragged-prefill (tether render)
# Evidence for sm90 ragged_prefill -> gluon (else per_request)
# where:
#   causal == True
#   kv_len >= qo_len
#   dtype in (f16 or bf16)
#   head_dim in (64 or 128)
#   hq//hkv within 2 to 16
#   hq within 4 to 64
#   batch >= 2
# sweep policy-ragged-sm90, population policy-ragged-sm90-region
# (reachable from ragged_prefill, batch >= 2, hq//hkv within 2 to 16, hq within 4 to 64).
# run 20261207T163026Z-sweep-policy-ragged-sm90-sm90-2d3ef1b21f8e
# (2026-12-07, git 0b066c853812, 1 blocks, 1 replicate runs)
# 42 cells, geomean 2.960,
# noise 0.963-1.039 (A/A floor 0.983-1.017
# times replicate band 0.979-1.021): faster;
# cells 42 faster, 0 slower, 0 level, 14 flagged cells not counted;
# worst cell batch=2 hq/hkv/head_dim/dtype=28/4/64/f16 mix=spread seqlen=4096
# at 1.068.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-ragged-prefill
# batch_prefill's short squares: the Triton kernel (64-row tiles for short calls) against
# cuDNN, as for single_prefill's short squares.
# BEGIN GENERATED: policy-sm90-batch-prefill-short (tether render)
# Evidence for sm90 batch_prefill -> triton (else sdpa_cudnn)
# where:
#   not set
# sweep policy-batch-short-sm90, population policy-batch-short-sm90-region
# (reachable from batch_prefill).
# run 20261203T151653Z-sweep-policy-batch-short-sm90-sm90-b2ce173a2813
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# stale: changed since the run: kernels/tether_kernels/gluon/__init__.py
# stale: changed since the run: kernels/tether_kernels/gluon/compat.py
# stale: changed since the run: kernels/tether_kernels/gluon/launch.py
# 12 cells, geomean 0.841,
# noise 0.995-1.005 (A/A floor 0.998-1.002
# times replicate band 0.996-1.004): slower;
# cells 1 faster, 10 slower, 1 level;
# worst cell batch=16 seqlen=512
# at 0.674.
# geomean_win: does not hold
# no_loss_outside_floor: does not hold
# END GENERATED: policy-sm90-batch-prefill-short
_SM90_BATCH_SHORT = Threshold(
    region="policy-sm90-batch-prefill-short",
    arch="sm90",
    entry="batch_prefill",
    arm="triton",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence("policy-batch-short-sm90", "batch_prefill", ()),
    takes=None,
    scope=_SM90_BATCH_SCOPE,
)
_SM90_RAGGED = Threshold(
    region="policy-sm90-ragged-prefill",
    arch="sm90",
    entry="ragged_prefill",
    arm="gluon",
    otherwise=PER_REQUEST,
    evidence=_sm90_evidence(
        "policy-ragged-sm90",
        "ragged_prefill",
        (("batch", ">=", 2), *SM90_RAGGED_LAYOUTS),
    ),
    takes=(("batch", ">=", 2),),
    scope=_SM90_RAGGED_SCOPE,
)
# BEGIN GENERATED: policy-single-prefill-gfx942 (tether render)
# Evidence for gfx942 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep prefill-vs-sdpa, population single-prefill-gate
# (reachable from single_prefill, qo_len >= 2048).
# not measured: the store has no guarded ok run of this sweep on gfx942.
# END GENERATED: policy-single-prefill-gfx942
_GFX942 = _threshold("gfx942", "sdpa_flash", None)
# BEGIN GENERATED: policy-gfx942-single-prefill-chunked (tether render)
# Evidence for gfx942 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep chunked-prefill, population single-prefill-chunked
# (reachable from single_prefill, qo_len >= 2048, kv_len > qo_len).
# not measured: the store has no guarded ok run of this sweep on gfx942.
# END GENERATED: policy-gfx942-single-prefill-chunked
_GFX942_CHUNKED = _chunked_threshold("gfx942", "sdpa_flash", None)
# BEGIN GENERATED: policy-single-prefill-gfx950 (tether render)
# Evidence for gfx950 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep prefill-vs-sdpa, population single-prefill-gate
# (reachable from single_prefill, qo_len >= 2048).
# not measured: the store has no guarded ok run of this sweep on gfx950.
# END GENERATED: policy-single-prefill-gfx950
_GFX950 = _threshold("gfx950", "sdpa_flash", None)
# BEGIN GENERATED: policy-gfx950-single-prefill-chunked (tether render)
# Evidence for gfx950 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep chunked-prefill, population single-prefill-chunked
# (reachable from single_prefill, qo_len >= 2048, kv_len > qo_len).
# not measured: the store has no guarded ok run of this sweep on gfx950.
# END GENERATED: policy-gfx950-single-prefill-chunked
_GFX950_CHUNKED = _chunked_threshold("gfx950", "sdpa_flash", None)
# BEGIN GENERATED: policy-single-prefill-gfx1151 (tether render)
# Evidence for gfx1151 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep prefill-vs-sdpa, population single-prefill-gate
# (reachable from single_prefill, qo_len >= 2048).
# not measured: the store has no guarded ok run of this sweep on gfx1151.
# END GENERATED: policy-single-prefill-gfx1151
_GFX1151 = _threshold("gfx1151", "sdpa_flash", None)
# BEGIN GENERATED: policy-gfx1151-single-prefill-chunked (tether render)
# Evidence for gfx1151 single_prefill -> triton (else sdpa_flash)
# where:
#   not set
# sweep chunked-prefill, population single-prefill-chunked
# (reachable from single_prefill, qo_len >= 2048, kv_len > qo_len).
# not measured: the store has no guarded ok run of this sweep on gfx1151.
# END GENERATED: policy-gfx1151-single-prefill-chunked
_GFX1151_CHUNKED = _chunked_threshold("gfx1151", "sdpa_flash", None)

# route() reads an arch's thresholds in this order; the first that takes its arm wins.
POLICY: tuple[Threshold, ...] = (
    _SM90,
    _SM90_SQUARE64,
    _SM90_SQUARE_HEADS,
    _SM90_SQUARE_SHORT,
    _SM90_CHUNKED,
    _SM90_WIDE,
    _SM90_WIDE_96,
    _SM90_BATCH,
    _SM90_BATCH_SHORT,
    _SM90_RAGGED,
    _GFX942,
    _GFX942_CHUNKED,
    _GFX950,
    _GFX950_CHUNKED,
    _GFX1151,
    _GFX1151_CHUNKED,
)

# The throughput and compile gates live in gates.py: setting a gate from a measurement changes
# no kernel source, so it never makes the evidence it rests on stale.


def threshold_for(arch: str, entry: str = "single_prefill") -> Threshold | None:
    """The first policy threshold for ``entry`` on ``arch``; None where the policy has none."""
    found = thresholds_for(arch, entry)
    return found[0] if found else None


def thresholds_for(arch: str, entry: str = "single_prefill") -> tuple[Threshold, ...]:
    """Every policy threshold for ``entry`` on ``arch``, in POLICY order (empty on cpu)."""
    check_arch(arch)
    return tuple(th for th in POLICY if th.arch == arch and th.entry == entry)
