"""Compile evidence: every variant of ``_attn_fwd`` an arch can run, compiled with no GPU.

For an arch, the variants are derived, not listed: ``launch_config`` is probed over head dims,
dtypes, query lengths and batch x heads until every config it can return is found; each config
is launched through the Triton arms themselves (``arms.get_arm(...).prepare``, on meta tensors,
with the kernel's ``run`` replaced by a recorder), over causal / not, with / without the
log-sum-exp and with an even and an odd GQA group (the launcher may fall back from two heads
per program). What the launcher passed is specialised exactly as Triton's JIT would
(``create_function_from_signature`` and ``JITFunction._pack_args`` for the target's backend),
then compiled by ``triton.compile`` for ``GPUTarget`` of the arch, in worker processes.

Specialisation follows the launch: 16-byte aligned tensors under 2 GB (buffer loads on AMD),
and query and key lengths that are multiples of 16 (every stride passed is: a tile as wide as
its head dim is at least 16, and a padded tile passes no strides, the kernel derives them from
the head dim). A call whose lengths are not (a ragged chunk) or whose tensors are unaligned
views or over 2 GB is a further JIT specialisation of the same variant that the map does not
compile.

The compiled code is read by ``tether_kernels_plugin.isa``: registers, spills, scratch, LDS, matrix
instructions in each main loop, and occupancy from the per-arch limits table. One run of kind
``compile`` per arch goes to the store; a run with the same kernel fingerprint and compiler
version means there is nothing to compile.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

from tether.errors import TetherError, UsageError
from tether.store import Cell, GuardRecord, new_run
from tether_kernels.archs import ARCH_TABLE, GPU_ARCHES, check_arch
from tether_kernels.arms import get_arm, torch_dtype
from tether_kernels.gates import COMPILE_KERNEL
from tether_kernels.launch_tables import LaunchConfig, launch_config
from tether_kernels.shapes import DTYPES, Shape

from tether_kernels_plugin.isa import (
    LIMITS,
    amd_occupancy,
    parse_amdgcn,
    parse_ptx,
    parse_ptxas,
    sm90_occupancy,
)

KERNEL = COMPILE_KERNEL  # the compile run's name
# The arms that launch _attn_fwd (arms.py): deferred rescale and the eager "before" arm.
# Their margins and launch configs are read from what they launch, not repeated here.
KERNEL_ARMS: tuple[str, ...] = ("triton", "triton_eager")
# (backend, arch, warp size) for triton.backends.compiler.GPUTarget: each arch row's target.
TARGETS: dict[str, tuple[str, int | str, int]] = {
    a.name: a.target for a in ARCH_TABLE if a.target is not None
}
# Probe ranges for launch_config: query lengths and batch x heads in powers of two, from the
# shortest call that is not specialised as a constant (Triton's JIT folds an int equal to 1)
# up to a 128K-token call and 4K heads, kept where every stride fits the i32 the JIT uses.
_PROBE_QO = tuple(2**i for i in range(4, 18))
_PROBE_BH = tuple(2**i for i in range(1, 13))  # even, so an even and an odd GQA group exist
# The canonical call a config is shown on: the nearest probe to 2K queries and 32 heads.
_CANONICAL = (2048, 32)
# The fp-fusion default warning of triton 3.9 is about a future default; the launcher runs
# with today's, and so does this compile.
_FP_FUSION_WARNING = "TRITON_DEFAULT_FP_FUSION is unset"


class CompileError(TetherError):
    """A variant did not compile, or its compiled code did not say what it uses."""


@dataclass(frozen=True)
class Variant:
    """One kernel variant: the cell key, the shape it was launched for, and its compile job."""

    key: dict[str, Any]
    shape: dict[str, Any]
    job: dict[str, Any]  # picklable: target, signature, constexprs, attrs, options


def compiler_version() -> str:
    import triton

    return str(triton.__version__)


def compile_key(root: Path) -> dict[str, str]:
    """The compiler a stored compile run must have been made by to stand for this one
    (tether.freshness judges whether it still describes the checkout's kernel sources)."""

    return {"compiler": "triton " + compiler_version()}


def _target(arch: str) -> Any:
    from triton.backends.compiler import GPUTarget

    if arch not in TARGETS:
        raise UsageError(f"no compile target for arch {arch!r}; targets: {', '.join(TARGETS)}")
    return GPUTarget(*TARGETS[arch])


def config_label(config: LaunchConfig) -> str:
    """``m128 n64 w4 s2 wpe2`` and the options that are on: a config's name in docs and keys."""
    parts = [
        f"m{config.block_m}",
        f"n{config.block_n}",
        f"w{config.num_warps}",
        f"s{config.num_stages}",
    ]
    if config.waves_per_eu is not None:
        parts.append(f"wpe{config.waves_per_eu}")
    flags = ("use_tma", "warp_specialize", "longest_first", "skip_rescale")
    parts += [name for name in flags if getattr(config, name)]
    if config.heads_per_program != 1:
        parts.append(f"hpp{config.heads_per_program}")
    if config.q_chunk:
        parts.append(f"qc{config.q_chunk}")
    if config.split_head_dim != 1:
        parts.append(f"split{config.split_head_dim}")
    return " ".join(parts)


def head_dims(arch: str) -> tuple[int, ...]:
    """Head dims the Triton arm serves on ``arch``, read from the arm's own ``supports``."""

    arm = get_arm(KERNEL_ARMS[0])
    return tuple(
        d for d in range(1, 513) if arm.supports(Shape(1, 16, 16, 1, 1, d, "f16"), arch) is None
    )


def _probes(head_dim: int) -> list[tuple[int, int]]:
    """(qo_len, batch_heads) probes, nearest the canonical call first (log distance)."""
    pairs = [(qo, bh) for qo in _PROBE_QO for bh in _PROBE_BH if qo * bh * head_dim < 2**31]

    def distance(pair: tuple[int, int]) -> tuple[int, int, int]:
        qo, bh = pair
        log = abs(qo.bit_length() - _CANONICAL[0].bit_length())
        log += abs(bh.bit_length() - _CANONICAL[1].bit_length())
        return (log, qo, bh)

    return sorted(pairs, key=distance)


def launch_configs(arch: str) -> list[tuple[int, str, LaunchConfig, int, int]]:
    """Every (head_dim, dtype, config, qo_len, batch_heads) where ``launch_config`` returns a
    config not seen before for that head_dim and dtype: the probe nearest the canonical call
    that picks each config is the shape it is compiled for."""

    arm = get_arm(KERNEL_ARMS[0])
    out = []
    for d in head_dims(arch):
        for dtype in DTYPES:
            if arm.supports(Shape(1, 16, 16, 1, 1, d, dtype), arch) is not None:
                continue
            seen: set[LaunchConfig] = set()
            for qo, bh in _probes(d):
                cfg = launch_config(arch, d, dtype, qo_len=qo, batch_heads=bh)
                if cfg not in seen:
                    seen.add(cfg)
                    out.append((d, dtype, cfg, qo, bh))
    return out


@contextlib.contextmanager
def _recording() -> Iterator[list[tuple[Any, tuple, dict]]]:
    """The kernel's ``run`` replaced by a recorder: launches are recorded, nothing runs.

    ``attn_fwd_launcher`` launches through ``_attn_fwd[grid](...)``, which calls the kernel
    object's ``run``; an instance attribute shadows the method for the duration only.
    """
    from tether_kernels.triton.attn_fwd import _attn_fwd

    calls: list[tuple[Any, tuple, dict]] = []

    def record(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        calls.append((grid, args, kwargs))

    _attn_fwd.run = record  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del _attn_fwd.run


def _meta_call(shape: Shape, lse: bool) -> tuple[Any, ...]:
    """q, k, v, out and lse (or None) for ``shape`` on the meta device: shapes, no memory."""
    import torch

    dt = torch_dtype(shape.dtype)
    q = torch.empty(shape.batch, shape.qo_len, shape.hq, shape.head_dim, dtype=dt, device="meta")
    k = torch.empty(shape.batch, shape.kv_len, shape.hkv, shape.head_dim, dtype=dt, device="meta")
    lse_t = None
    if lse:
        lse_t = torch.empty(shape.batch, shape.hq, shape.qo_len, dtype=torch.float32, device="meta")
    return q, k, torch.empty_like(k), torch.empty_like(q), lse_t


def _one_launch(calls: list[tuple[Any, tuple, dict]], what: str) -> tuple[tuple, dict]:
    if len(calls) != 1:
        raise CompileError(f"{what} launched _attn_fwd {len(calls)} times")
    return calls[0][1], calls[0][2]


def _launch(arm_name: str, shape: Shape, arch: str, lse: bool) -> tuple[tuple, dict]:
    """What the arm ``arm_name`` passes to the kernel for ``shape`` on ``arch``."""

    q, k, v, out, lse_t = _meta_call(shape, lse)
    with _recording() as calls:
        get_arm(arm_name).prepare(q, k, v, shape, out=out, lse=lse_t, arch=arch)()
    return _one_launch(calls, f"arm {arm_name} on {shape.key()}")


def launch_with(config: LaunchConfig, shape: Shape, margin: int, lse: bool) -> tuple[tuple, dict]:
    """What the launcher passes to the kernel for ``shape`` under a candidate ``config``."""
    from tether_kernels.triton.attn_fwd import attn_fwd_launcher

    q, k, v, out, lse_t = _meta_call(shape, lse)
    with _recording() as calls:
        attn_fwd_launcher(q, k, v, out, config, causal=shape.causal, margin=margin, lse=lse_t)()
    return _one_launch(calls, f"config {config_label(config)} on {shape.key()}")


def arm_margins(arch: str) -> dict[str, int]:
    """The rescale margin each kernel arm launches with, read from one launch of each."""
    shape = Shape(1, _CANONICAL[0], _CANONICAL[0], _CANONICAL[1], _CANONICAL[1], 64, "f16")
    names = _param_names()
    out = {}
    for arm in KERNEL_ARMS:
        args, kwargs = _launch(arm, shape, arch, False)
        out[arm] = int(dict(zip(names, args, strict=False)).get("MARGIN", kwargs["MARGIN"]))
    return out


_JIT: list[Any] = []


def _jit_kernel() -> Any:
    """``_attn_fwd`` as a JITFunction, also where TRITON_INTERPRET=1 made it an interpreted
    one (the CPU test runs): the JIT's own specialisation needs its signature and params."""
    if not _JIT:
        from tether_kernels.triton.attn_fwd import _attn_fwd
        from triton.runtime.jit import JITFunction

        _JIT.append(_attn_fwd if isinstance(_attn_fwd, JITFunction) else JITFunction(_attn_fwd.fn))
    return _JIT[0]


_RUN_KNOBS = ("instrumentation_mode", "fpsan_homomorphic_casts")


def _specialise(arch: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The compile job Triton's JIT would make of this launch for ``arch`` (JITFunction.run)."""
    from triton import knobs
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = _jit_kernel()
    target = _target(arch)
    backend = make_backend(target)
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    # The compilation knobs run() passes as options differ between Triton versions (3.6 passes
    # instrumentation_mode, 3.9 also fpsan_homomorphic_casts): pass those this one has.
    for knob in _RUN_KNOBS:
        if hasattr(knobs.compilation, knob):
            kwargs[knob] = getattr(knobs.compilation, knob)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_FP_FUSION_WARNING)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(
            backend, kwargs, bound, specialization, options
        )
    return {
        "arch": arch,
        "target": TARGETS[arch],
        "signature": signature,
        "constexprs": constexprs,
        "attrs": attrs,
        "options": dict(options.__dict__),
    }


def _identity(job: dict[str, Any]) -> str:
    """A job without the head counts: HQ and GROUP only enter index arithmetic, so one
    representative of each (even / odd group) stands for the rest."""
    names = {(i,): n for i, n in enumerate(_param_names())}
    consts = {names[k]: v for k, v in job["constexprs"].items() if names[k] not in ("HQ", "GROUP")}
    body = [job["signature"], consts, sorted(map(repr, job["attrs"].items())), job["options"]]
    return json.dumps(body, sort_keys=True, default=repr)


def _param_names() -> list[str]:
    from tether_kernels.triton.attn_fwd import _attn_fwd

    return list(_attn_fwd.arg_names)


def variants(arch: str) -> list[Variant]:
    """Every distinct compile of ``_attn_fwd`` the Triton arms make on ``arch``.

    The head dims padded onto one tile (72 to 120 onto 128) share one compile where their
    launch config is the same: the kernel takes the head dim as a run-time argument. The
    variant is keyed by the smallest of them; its ``shape`` lists all (``head_dims``)."""
    check_arch(arch)
    names = _param_names()
    found: dict[str, Variant] = {}
    for d, dtype, cfg, qo, bh in launch_configs(arch):
        for group in (2, 1):
            for causal in (True, False):
                for lse in (False, True):
                    for arm in KERNEL_ARMS:
                        shape = Shape(1, qo, qo, bh, bh // group, d, dtype, causal)
                        args, kwargs = _launch(arm, shape, arch, lse)
                        job = _specialise(arch, args, kwargs)
                        ident = _identity(job)
                        if ident in found:
                            dims = found[ident].shape["head_dims"]
                            if d not in dims:
                                dims.append(d)
                            continue
                        c = {names[k[0]]: v for k, v in job["constexprs"].items()}
                        key = {
                            "head_dim": d,
                            "dtype": dtype,
                            "causal": causal,
                            "margin": c["MARGIN"],
                            "lse": bool(c["STORE_LSE"]),
                            "heads": c["HEADS"],
                            "config": config_label(cfg),
                        }
                        found[ident] = Variant(
                            key, {**shape.key(), "arm": arm, "head_dims": [d]}, job
                        )
    return list(found.values())


# -- compiling (worker processes) -------------------------------------------------------------


def _init_worker(cache_dir: str) -> None:
    # A private cache and always-compile: every figure comes from this compile, and ptxas
    # reports its usage only when it runs. The CPU test runs set TRITON_INTERPRET=1, under
    # which triton.jit makes interpreted functions that do not compile; not in here.
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    warnings.filterwarnings("ignore", message=_FP_FUSION_WARNING)


def compile_job(job: dict[str, Any]) -> dict[str, Any]:
    """Compile one variant and read its code: the metrics of one compile cell."""
    import triton
    from tether_kernels.triton.attn_fwd import _attn_fwd
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget(*job["target"])
    src = ASTSource(_attn_fwd, job["signature"], job["constexprs"], job["attrs"])
    log = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(src, target=target, options=job["options"])
    except Exception as exc:  # the compiler's own errors carry no common base class
        raise CompileError(f"{job['arch']}: triton.compile failed: {exc}") from None
    seconds = time.perf_counter() - start
    arch = job["arch"]
    lim = LIMITS[arch]
    num_warps = int(kernel.metadata.num_warps)
    metrics: dict[str, Any] = {
        "compile_s": round(seconds, 3),
        "num_warps": num_warps,
        "num_stages": int(job["options"]["num_stages"]),
        "waves_per_eu": job["options"].get("waves_per_eu"),
    }
    try:
        if lim.vendor == "amd":
            metrics.update(parse_amdgcn(kernel.asm["amdgcn"]))
            lds = int(kernel.metadata.shared) + metrics["static_lds_bytes"]
            occ = amd_occupancy(lim, metrics["vgprs_total"], metrics["sgprs"], lds, num_warps)
        else:
            metrics.update(parse_ptxas(log.getvalue()))
            metrics.update(parse_ptx(kernel.asm["ptx"]))
            lds = int(kernel.metadata.shared)
            occ = sm90_occupancy(lim, metrics["n_regs"], lds, num_warps)
            notes = [ln.strip() for ln in log.getvalue().splitlines() if "Performance" in ln]
            metrics["ptxas_notes"] = notes
    except ValueError as exc:
        raise CompileError(f"{arch}: {exc}") from None
    metrics["lds_bytes"] = lds
    metrics["lds_limit_bytes"] = lim.lds_per_workgroup
    metrics["occupancy"] = occ
    return metrics


def _cost(job: dict[str, Any]) -> tuple[int, int]:
    """A guess at how long a job compiles, to start the longest first: f32 dots unroll into
    scalar code, and the work grows with the head dim and the tile."""
    c = job["constexprs"]
    names = _param_names()
    get = {names[k[0]]: v for k, v in c.items()}
    return (
        int(bool(get.get("IEEE_DOT"))),
        int(get["HEAD_DIM_PAD"]) * int(get["BLOCK_M"]) * int(get["BLOCK_N"]),
    )


def compile_all(
    jobs: list[dict[str, Any]], workers: int, err: TextIO | None = None
) -> list[dict[str, Any]]:
    """Compile ``jobs`` over ``workers`` processes, the costliest first (so the pool does not
    end on one long job), and return the metrics in the order of ``jobs``."""
    order = sorted(range(len(jobs)), key=lambda i: _cost(jobs[i]), reverse=True)
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    with tempfile.TemporaryDirectory(prefix="tether-compile-") as cache:
        ctx = get_context("spawn")  # no fork of a process that has imported torch
        with ProcessPoolExecutor(
            workers, mp_context=ctx, initializer=_init_worker, initargs=(cache,)
        ) as pool:
            done = pool.map(compile_job, [jobs[i] for i in order])
            for n, (i, metrics) in enumerate(zip(order, done, strict=True), start=1):
                results[i] = metrics
                if err is not None and (n % 50 == 0 or n == len(jobs)):
                    print(f"  compiled {n}/{len(jobs)}", file=err)
    return [m for m in results if m is not None]


# -- the run ----------------------------------------------------------------------------------


def summarise(cells: list[Any]) -> dict[str, Any]:
    """The run's results from its cells: counts a document can cite without recounting."""
    extras = [c.extra for c in cells]
    occ = [_occupancy_value(e) for e in extras]
    return {
        "variants": len(cells),
        "spills_total": sum(int(e["spills"]) for e in extras),
        "variants_spilling": sum(1 for e in extras if e["spills"] > 0),
        "variants_over_lds": sum(1 for e in extras if e["lds_bytes"] > e["lds_limit_bytes"]),
        "variants_loop_without_matrix": sum(
            1 for e in extras if any(loop["matrix"] == 0 for loop in e["loops"]) or not e["loops"]
        ),
        "occupancy_min": min(occ),
        "occupancy_max": max(occ),
        "occupancy_unit": "blocks per SM"
        if "blocks_per_sm" in extras[0]["occupancy"]
        else "waves per SIMD",
    }


def _occupancy_value(extra: dict[str, Any]) -> int:
    occ = extra["occupancy"]
    return int(occ.get("waves_per_simd", occ.get("blocks_per_sm", 0)))


def compile_arch(
    arch: str, root: Path, *, workers: int | None = None, err: TextIO | None = None
) -> Any:
    """Compile every variant for ``arch`` and return the compile run (not yet written)."""

    if arch not in GPU_ARCHES or arch not in TARGETS:
        raise UsageError(f"tether compile: {arch!r} is not a GPU arch with a compile target")
    started = time.time()
    plan = variants(arch)
    if err is not None:
        print(f"{arch}: {len(plan)} variants", file=err)
    workers = workers or max(1, os.cpu_count() or 1)
    metrics = compile_all([v.job for v in plan], workers, err)
    cells = [
        Cell(
            key=v.key,
            work=0.0,
            samples={},
            kernels={"compiled": ("_attn_fwd",)},
            extra={**m, "shape": v.shape},
        )
        for v, m in zip(plan, metrics, strict=True)
    ]
    seconds = time.time() - started
    target = TARGETS[arch]
    results = {
        "compiler": "triton",
        "compiler_version": compiler_version(),
        "target": ":".join(str(t) for t in target),
        **summarise(cells),
        "seconds": round(seconds, 1),
    }
    return new_run(
        "compile",
        KERNEL,
        arch=arch,
        device=f"none: compiled for {target[0]} {target[1]}, no GPU used",
        config={
            "kernel": "tether_kernels.triton.attn_fwd._attn_fwd",
            "kernel_arms": list(KERNEL_ARMS),
            "limits": asdict(LIMITS[arch]),
            "workers": workers,
            "enable_fp_fusion": bool(plan[0].job["options"].get("enable_fp_fusion"))
            if plan
            else None,
        },
        cells=cells,
        results=results,
        # Nothing runs on a device: the compiler's output does not depend on who else uses
        # the host, so there is nothing to hold (compile runs are never timing evidence).
        guard=GuardRecord(mode="unguarded", reason="compiled without a GPU: nothing to hold"),
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        root=root,
    )


@dataclass(frozen=True)
class Compiler:
    """This kernel library's compiler as ``tether compile`` reaches it (tether.registry)."""

    name: str
    targets: dict[str, tuple[str, int | str, int]]

    def key(self, root: Path) -> dict[str, str]:
        return compile_key(root)

    def compile_arch(
        self, arch: str, root: Path, *, workers: int | None = None, err: TextIO | None = None
    ) -> Any:
        return compile_arch(arch, root, workers=workers, err=err)


COMPILER = Compiler(KERNEL, TARGETS)
