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
# calls at head_dim 96 and 256 (against the Triton kernel, which takes them otherwise). Each threshold's scope names the
# dtypes, head_dims and heads (query/kv head pairs) its evidence sweep covers, and the check
# holds the threshold's region, every combination of those values, inside the evidence's
# cells. Squares at head_dim 64 and long MHA squares are in no scope: no evidence sweep
# measures them (validate/tools/breadth_session.py, which writes no run, is what chose the
# scopes). Calls outside every scope take the route order (cuDNN, then the Triton kernel,
# then PyTorch's math backend).
_SM90_HEADS = (("head_dim", "==", 128), ("hq", "==", 32), ("hkv", "==", 8))
_SM90_HALF = (("dtype", "in", ("f16", "bf16")),)
_SM90_PAIRS = ("32/8", "32/32", "8/1")


def _sm90_evidence(sweep: str, entry: str, where: tuple[tuple[str, str, object], ...]) -> Evidence:
    return Evidence(
        sweep=sweep,
        population=Population(name=f"{sweep}-region", entry=entry, where=where),
        predicates=("geomean_win", "no_loss_outside_floor"),
    )


_SM90_CHUNKED_SCOPE = (
    ("causal", "==", True),
    ("kv_len", ">", "qo_len"),
    *_SM90_HALF,
    ("head_dim", "in", (64, 128)),
    ("hq/hkv", "in", _SM90_PAIRS),
)
# Causal squares at head_dim 128: the long ones' and the short ones' scopes differ only in the
# heads their evidence covers and the short ones' upper bound.
_SM90_SQUARE_HD128 = (
    ("causal", "==", True),
    ("kv_len", "==", "qo_len"),
    *_SM90_HALF,
    ("head_dim", "==", 128),
)
_SM90_SQUARE_SCOPE = (*_SM90_SQUARE_HD128, ("hq/hkv", "in", ("32/8", "8/1")))
_SM90_SQUARE_SHORT_SCOPE = (
    *_SM90_SQUARE_HD128,
    ("hq/hkv", "in", _SM90_PAIRS),
    # Below the Gluon threshold's region: the two never both take a call.
    ("qo_len", "<", 2048),
)
# Causal calls at head_dim 96 and 256, chunked and square: cuDNN is declared here only for the
# head_dims run on the H200 (arms._GPU_SDPA_DIMS), so the arm they otherwise take is the Triton
# kernel.
_SM90_WIDE_SCOPE = (
    ("causal", "==", True),
    *_SM90_HALF,
    ("head_dim", "in", (96, 256)),
    ("hq/hkv", "in", _SM90_PAIRS),
)
# ragged_prefill (requests of their own lengths, packed): the Gluon kernel's ragged launch (one
# launch for the batch) against per_request, which runs each request as single_prefill would
# (one launch each, every request routed by the thresholds above). The thresholds read the
# batch's envelope: its batch and its longest request; the evidence's batches are square
# requests spread up to the longest (kv_len == qo_len), as the scope says.
_SM90_RAGGED_SCOPE = (
    ("causal", "==", True),
    ("kv_len", "==", "qo_len"),
    *_SM90_HALF,
    ("head_dim", "in", (64, 128)),
    ("hq/hkv", "in", _SM90_PAIRS),
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
#   hq/hkv in (32/8 or 32/32 or 8/1)
#   qo_len >= 128
# sweep policy-chunked-sm90, population policy-chunked-sm90-region
# (reachable from single_prefill, qo_len >= 128, kv_len > qo_len).
# run 20261203T150722Z-sweep-policy-chunked-sm90-sm90-d876e2a0c2e7
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# 48 cells, geomean 3.703,
# noise 0.981-1.020 (A/A floor 0.996-1.004
# times replicate band 0.985-1.015): faster;
# cells 48 faster, 0 slower, 0 level;
# worst cell dtype=bf16 head_dim=64 hq/hkv=32/32 kv_len=32768 qo_len=1024
# at 1.752.
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
        "policy-chunked-sm90", "single_prefill", (("qo_len", ">=", 128), ("kv_len", ">", "qo_len"))
    ),
    takes=(("qo_len", ">=", 128),),
    scope=_SM90_CHUNKED_SCOPE,
)
# BEGIN GENERATED: policy-single-prefill-sm90 (tether render)
# Evidence for sm90 single_prefill -> gluon (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   head_dim == 128
#   hq/hkv in (32/8 or 8/1)
#   qo_len >= 2048
# sweep policy-square-sm90, population policy-square-sm90-region
# (reachable from single_prefill, qo_len >= 2048).
# run 20261203T150751Z-sweep-policy-square-sm90-sm90-9710b743e4fa
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# 12 cells, geomean 1.208,
# noise 0.987-1.013 (A/A floor 0.996-1.004
# times replicate band 0.991-1.009): faster;
# cells 12 faster, 0 slower, 0 level;
# worst cell dtype=bf16 hq/hkv=32/8 seqlen=16384
# at 1.116.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-single-prefill-sm90
_SM90 = Threshold(
    region="policy-single-prefill-sm90",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="sdpa_cudnn",
    evidence=_sm90_evidence("policy-square-sm90", "single_prefill", (("qo_len", ">=", 2048),)),
    takes=(("qo_len", ">=", 2048),),
    scope=_SM90_SQUARE_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-square-short (tether render)
# Evidence for sm90 single_prefill -> triton (else sdpa_cudnn)
# where:
#   causal == True
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   head_dim == 128
#   hq/hkv in (32/8 or 32/32 or 8/1)
#   qo_len < 2048
#   qo_len >= 128
# sweep policy-square-short-sm90, population policy-square-short-sm90-region
# (reachable from single_prefill, qo_len >= 128, qo_len < 2048).
# run 20261203T150807Z-sweep-policy-square-short-sm90-sm90-2355851806c0
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# 18 cells, geomean 1.316,
# noise 0.967-1.034 (A/A floor 0.989-1.011
# times replicate band 0.978-1.022): faster;
# cells 18 faster, 0 slower, 0 level;
# worst cell dtype=f16 hq/hkv=32/8 seqlen=512
# at 1.126.
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
        (("qo_len", ">=", 128), ("qo_len", "<", 2048)),
    ),
    takes=(("qo_len", ">=", 128),),
    scope=_SM90_SQUARE_SHORT_SCOPE,
)
# BEGIN GENERATED: policy-sm90-single-prefill-wide (tether render)
# Evidence for sm90 single_prefill -> gluon (else triton)
# where:
#   causal == True
#   dtype in (f16 or bf16)
#   head_dim in (96 or 256)
#   hq/hkv in (32/8 or 32/32 or 8/1)
#   qo_len >= 128
# sweep policy-wide-sm90, population policy-wide-sm90-region
# (reachable from single_prefill, qo_len >= 128).
# run 20261203T150823Z-sweep-policy-wide-sm90-sm90-1df19a2e3270
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# 48 cells, geomean 3.207,
# noise 0.984-1.017 (A/A floor 0.998-1.002
# times replicate band 0.986-1.014): faster;
# cells 48 faster, 0 slower, 0 level;
# worst cell dtype=f16 head_dim=96 hq/hkv=8/1 kv_len=2048 qo_len=2048
# at 1.239.
# geomean_win: holds
# no_loss_outside_floor: holds
# END GENERATED: policy-sm90-single-prefill-wide
_SM90_WIDE = Threshold(
    region="policy-sm90-single-prefill-wide",
    arch="sm90",
    entry="single_prefill",
    arm="gluon",
    otherwise="triton",
    evidence=_sm90_evidence("policy-wide-sm90", "single_prefill", (("qo_len", ">=", 128),)),
    takes=(("qo_len", ">=", 128),),
    scope=_SM90_WIDE_SCOPE,
)
# BEGIN GENERATED: policy-sm90-batch-prefill (tether render)
# Evidence for sm90 batch_prefill -> gluon (else sdpa_cudnn)
# where:
#   not set
# sweep policy-batch-sm90, population policy-batch-sm90-region
# (reachable from batch_prefill).
# run 20261203T151638Z-sweep-policy-batch-sm90-sm90-2767128c67a5
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
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
#   kv_len == qo_len
#   dtype in (f16 or bf16)
#   head_dim in (64 or 128)
#   hq/hkv in (32/8 or 32/32 or 8/1)
#   batch >= 2
#   qo_len >= 256
# sweep policy-ragged-sm90, population policy-ragged-sm90-region
# (reachable from ragged_prefill, batch >= 2, qo_len >= 256).
# run 20261203T150850Z-sweep-policy-ragged-sm90-sm90-c6f9a42dea82
# (2026-12-03, git c7f7d91ac69d, 1 blocks, 1 replicate runs)
# 96 cells, geomean 2.084,
# noise 0.972-1.029 (A/A floor 0.991-1.009
# times replicate band 0.981-1.019): faster;
# cells 96 faster, 0 slower, 0 level;
# worst cell batch=8 dtype=bf16 head_dim=128 hq/hkv=32/32 seqlen=4096
# at 1.052.
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
        "policy-ragged-sm90", "ragged_prefill", (("batch", ">=", 2), ("qo_len", ">=", 256))
    ),
    takes=(("batch", ">=", 2), ("qo_len", ">=", 256)),
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
    _SM90_SQUARE_SHORT,
    _SM90_CHUNKED,
    _SM90_WIDE,
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
