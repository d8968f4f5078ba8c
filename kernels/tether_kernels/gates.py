"""Gates: throughput gates on the public entry points and compile gates on every arch.

Data the check judges (``[tool.tether] policy`` lists this file beside policy.py), kept out
of the kernel sources: setting a gate's threshold from a measurement changes no kernel source,
so it never makes the runs it rests on stale. Pure data, no torch. The regions between
``BEGIN GENERATED`` / ``END GENERATED`` are written by ``tether render`` from the store.
"""

from __future__ import annotations

from tether.policy import CompileGate, Gate

# The public API's gated calls, as a serving stack makes them: one request, bf16, head_dim 128,
# 32 query heads over 8 kv heads, causal. Measured by sweep gate-calls-api (before: the arm
# these calls took before the policy routed them to Gluon; after: single_prefill as called).
_API_CALL: dict[str, object] = {
    "batch": 1,
    "hq": 32,
    "hkv": 8,
    "head_dim": 128,
    "dtype": "bf16",
    "causal": True,
}
API_CHUNKED_1K_16K: dict[str, object] = {**_API_CALL, "qo_len": 1024, "kv_len": 16384}
API_SQUARE_2K: dict[str, object] = {**_API_CALL, "qo_len": 2048, "kv_len": 2048}

# BEGIN GENERATED: gate-sm90-api-chunked-1k-16k (tether render)
# Gate sm90-api-chunked-1k-16k-bf16 on sm90: single_prefill, threshold 600.0 TFLOP/s.
# before: 20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd (role A, sdpa_cudnn)
#   measured 334.5 TFLOP/s,
#   band 333.7 TFLOP/s to 335.0 TFLOP/s
# after: 20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd (role B, single_prefill)
#   measured 705.1 TFLOP/s,
#   band 705.1 TFLOP/s to 705.2 TFLOP/s
# END GENERATED: gate-sm90-api-chunked-1k-16k
_GATE_API_CHUNKED = Gate(
    id="sm90-api-chunked-1k-16k-bf16",
    region="gate-sm90-api-chunked-1k-16k",
    arch="sm90",
    arm="single_prefill",
    case="attention",
    call=API_CHUNKED_1K_16K,
    # Set between the guarded before (cuDNN, the arm this call took before the policy routed
    # it to Gluon: role A) and after (single_prefill as called: role B) of this call, measured
    # side by side in short bursts from rest (sweep gate-calls-api, two runs of one commit),
    # clear of both replicate bands; tether check holds it there.
    threshold=600e12,
    before_run="20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd",
    after_run="20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd",
    before_role="A",
    after_role="B",
)
# BEGIN GENERATED: gate-sm90-api-square-2k (tether render)
# Gate sm90-api-square-2k-bf16 on sm90: single_prefill, threshold 425.0 TFLOP/s.
# before: 20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd (role A, sdpa_cudnn)
#   measured 413.3 TFLOP/s,
#   band 412.6 TFLOP/s to 414.0 TFLOP/s
# after: 20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd (role B, single_prefill)
#   measured 454.8 TFLOP/s,
#   band 453.4 TFLOP/s to 455.0 TFLOP/s
# END GENERATED: gate-sm90-api-square-2k
_GATE_API_SQUARE = Gate(
    id="sm90-api-square-2k-bf16",
    region="gate-sm90-api-square-2k",
    arch="sm90",
    arm="single_prefill",
    case="attention",
    call=API_SQUARE_2K,
    threshold=425e12,  # set as the chunked gate's is
    before_run="20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd",
    after_run="20261207T162959Z-sweep-gate-calls-api-sm90-16dba47e90cd",
    before_role="A",
    after_role="B",
)

GATES: tuple[Gate, ...] = (_GATE_API_CHUNKED, _GATE_API_SQUARE)

# Compile gates (issue 13): every variant of _attn_fwd the Triton arms launch on the arch,
# compiled by `tether compile` with no GPU, must not spill, must fit the arch's LDS (shared
# memory), and must run its main loops on the matrix units for the dtypes the arch has
# matrix instructions for: f16 and bf16 everywhere; f32 only on CDNA (v_mfma_f32_*_f32, in
# the CDNA3 and CDNA4 ISA guides). RDNA3.5 WMMA takes no f32 inputs (RDNA3 ISA guide), and on
# sm90 the f32 arm asks for IEEE products (input_precision="ieee"), which the tensor cores do
# not compute; those dots run on FMAs by design. validate/gates/test_compile_gates.py judges
# the newest compile run of each arch (compiling anew when it is stale).
COMPILE_KERNEL = "attn-fwd"  # the compile run's name (tether_kernels_plugin.compile.KERNEL)
COMPILE_GATES: tuple[CompileGate, ...] = (
    CompileGate(
        "compile-sm90",
        "sm90",
        COMPILE_KERNEL,
        matrix_dtypes=("f16", "bf16"),
        region="launch-configs-sm90",
    ),
    CompileGate(
        "compile-gfx942",
        "gfx942",
        COMPILE_KERNEL,
        matrix_dtypes=("f16", "bf16", "f32"),
        region="launch-configs-gfx942",
    ),
    CompileGate(
        "compile-gfx950",
        "gfx950",
        COMPILE_KERNEL,
        matrix_dtypes=("f16", "bf16", "f32"),
        region="launch-configs-gfx950",
    ),
    CompileGate(
        "compile-gfx1151",
        "gfx1151",
        COMPILE_KERNEL,
        matrix_dtypes=("f16", "bf16"),
        region="launch-configs-gfx1151",
    ),
)
