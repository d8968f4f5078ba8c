"""``tether probe``: the causal Triton call against a dense-matmul bound from the same run.

A throughput number means little without the device's own ceiling next to it, measured in
the same minutes on the same device: the probe times a dense N x N x N matmul in each dtype
(the bound), then the chunked-prefill calls (qo_len 2048 against kv_len 2K, 8K, 16K, f16 and
bf16) with Triton as role B and the best SDPA arm as role A for context, and writes a
``probe`` run whose ``results`` carry the bound.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, TextIO

from tether.bench.engine import TimingPolicy, measure
from tether.bench.sweep import SweepDef, Target, run_sweep

PROBE_NAME = "triton-chunked-prefill"
BOUND_N = 8192

PROBE = SweepDef(
    name=PROBE_NAME,
    axes={"kv_len": (2048, 8192, 16384), "dtype": ("f16", "bf16")},
    fixed={"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
    arms={"A": ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"), "B": "triton"},
    entry_points=("single_prefill",),
    timing=TimingPolicy(cell_cap_s=2.0),
    description="single_prefill chunked shapes against the dense matmul bound",
)

# Interpreter-sized: the same code path on the CPU in seconds (TRITON_INTERPRET=1).
TINY_POLICY = TimingPolicy(calls_per_sample=1, warmup_calls=1, min_reps=2, max_reps=2)
TINY = PROBE.replace(
    axes={"kv_len": (16, 32), "dtype": ("f16",)},
    fixed={"batch": 1, "qo_len": 16, "hq": 2, "hkv": 1, "head_dim": 16, "causal": True},
    arms={"A": ("sdpa_flash", "sdpa_math"), "B": "triton"},
    timing=TINY_POLICY,
    needs_gpu=False,
)
TINY_BOUND_N = 256


def matmul_bound(
    n: int, dtype: str, device: str, policy: TimingPolicy
) -> tuple[float, dict[str, Any]]:
    """Throughput (1e12 FLOPs per second) of an n x n x n matmul in ``dtype`` (2 n^3 FLOPs), timed by the engine."""
    import torch

    from tether.bench.sweep import _TORCH_DTYPES

    torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    if device == "cpu" and dtype != "f32":
        torch_dtype = torch.float32  # CPU half matmuls are emulated; the bound would be wrong
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    c = torch.empty(n, n, device=device, dtype=torch_dtype)

    def call() -> Any:
        return torch.matmul(a, b, out=c)

    timing = measure({"B": call}, policy, device=device)
    seconds = statistics.median(timing.samples["B"])
    return 2.0 * n**3 / seconds / 1e12, {"dtype": str(torch_dtype), "n": n, **timing.extra}


def run_probe(
    *,
    store: Path,
    root: Path,
    tiny: bool = False,
    target: Target | None = None,
    holding: Any = None,
    err: TextIO | None = None,
) -> Any:
    """Measure the bound and the probe cells; write and return the ``probe`` run."""
    target = target or Target.detect()
    sweep = TINY if tiny else PROBE
    n = TINY_BOUND_N if tiny else BOUND_N
    policy = sweep.timing
    bounds: dict[str, float] = {}
    described: dict[str, str] = {}
    for dtype in sweep.axes["dtype"]:
        bounds[dtype], info = matmul_bound(n, dtype, target.device, policy)
        described[dtype] = info["dtype"].replace("torch.", "")
    # The run's single bound is the first dtype's; each cell also records its own dtype's.
    first = sweep.axes["dtype"][0]
    results = {
        "bound_tflops": bounds[first],
        "bound": f"dense {n}x{n}x{n} {described[first]} matmul (torch.matmul), same run",
    }
    run = run_sweep(
        sweep, store=store, root=root, target=target, holding=holding, err=err,
        kind="probe", results=results, write=False,
    )  # fmt: skip
    from tether.store import new_run, write_run
    from tether.store.model import Cell

    cells = [
        Cell(**{**_cell_fields(c), "extra": {**c.extra, "bound_tflops": bounds[c.key["dtype"]]}})
        for c in run.cells
    ]
    final = new_run(
        "probe", run.name, arch=run.arch, device=run.provenance["device"], config=run.config,
        status=run.status, reason=run.reason, guard=run.guard, cells=cells,
        results=run.results, started=run.started, ended=run.provenance["ended"], root=root,
        runtime=target.runtime, driver=target.driver,
    )  # fmt: skip
    write_run(final, store)
    return final


def _cell_fields(cell: Any) -> dict[str, Any]:
    return {
        "key": cell.key,
        "flops": cell.flops,
        "samples": cell.samples,
        "kernels": cell.kernels,
        "reach": cell.reach,
        "flags": cell.flags,
        "extra": cell.extra,
    }
