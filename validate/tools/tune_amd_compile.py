"""Issue 13: choose the launch configs no timing run covers from compile evidence (no GPU).

Those are every AMD config (no AMD host has been measured) and sm90's f32 tiles (no sweep
times f32 on the H200; sm90's f16 and bf16 configs come from timing runs, kernels/NOTES.md).
For each arch, head dim the Triton arm serves, and dtype searched, candidate launch configs are
compiled for the variants the deferred-rescale arm launches (causal or not, with or without
the LSE) through ``tether_kernels_plugin.compile``, exactly as ``tether compile`` compiles the
shipped configs (which then covers the eager arm too). A candidate is clean when no variant spills, its LDS
fits the arch, and (for a dtype the arch multiplies on its matrix units, see COMPILE_GATES)
every main loop has a matrix instruction. Among clean candidates the rule picks, in order:

1. reaching ``OCCUPANCY_TARGET`` waves per SIMD (AMD's own Triton attention configs, ROCm/aiter
   ``MI300X-MHA-DEFAULT.json`` and ``MI350X-MHA-DEFAULT.json``, ask for ``waves_per_eu`` 2);
   on sm90 the same count of resident warps per SM sub-partition (an SM has four, each with
   its own scheduler, as a CU has four SIMDs);
2. the larger tile (block_m x block_n: more work per wave; AMD's default tile, 128 x 64, is
   the largest candidate);
3. the higher occupancy;
4. fewer stages, then fewer warps.

Tiles are tried from the largest down, and the search stops at the first tile area that has a
clean candidate reaching the target: rule 2 ranks a smaller tile below it. When no
candidate is clean, the one that spills least is recorded as ``fallback`` and shipped, so the
compile gate names the spill. Run::

    python3 validate/tools/tune_amd_compile.py --out kernels/tuning/amd-compile-search-DATE.json
    python3 validate/tools/tune_amd_compile.py --arch sm90 --out kernels/tuning/sm90-f32-compile-search-DATE.json

It prints one line per (arch, head_dim, dtype) with the chosen config and writes every
candidate's compiled figures to ``--out``. ``--arch``, ``--head-dim`` and ``--dtype`` narrow the
search; ``--cell ARCH:HEAD_DIM:DTYPE`` (repeatable) names exact cells instead.

Compilers differ: a pick clean under one Triton may spill under another (some picks made under
3.9 spill under the H200's Triton 3.6). ``--also-under PYTHON`` searches with a second
compiler too (the Python whose Triton it is runs this tool with ``--judge``): a candidate is
clean only when clean under both, and both verdicts are recorded.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tether_kernels.archs import AMD_ARCHES
from tether_kernels.gates import COMPILE_GATES
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.shapes import DTYPES, Shape
from tether_kernels_plugin import compile as C

OCCUPANCY_TARGET = 2  # waves per SIMD (warps per SM sub-partition on sm90); see the docstring
# The arches and dtypes the search covers: sm90's f16 and bf16 configs come from timing runs.
SEARCHED: dict[str, tuple[str, ...]] = {**{a: DTYPES for a in AMD_ARCHES}, "sm90": ("f32",)}
SM90_SUBPARTITIONS = 4  # warp schedulers per SM (NVIDIA Hopper tuning guide)
SM90_MAX_REGS = 255  # registers a thread can address (CUDA C Programming Guide, compute 9.0)


def cannot_fit(arch: str, config: LaunchConfig, d: int, dtype: str) -> str | None:
    """Why ``config`` must spill on ``arch`` before compiling it, or None.

    On sm90 the query tile and the f32 accumulator stay in registers across the key loop, so
    a tile whose two alone need more than a thread's registers spills whatever else the
    compiler does; compiling such f32 tiles takes LLVM minutes each, so they are not compiled.
    """
    if arch != "sm90":
        return None
    q_bytes = 4 if dtype == "f32" else 2
    need = config.block_m * d * (4 + q_bytes) // 4 // (32 * config.num_warps)
    if need > SM90_MAX_REGS:
        return f"Q and acc alone take {need} registers per thread (over {SM90_MAX_REGS})"
    return None


# Tiles (block_m, block_n) from the largest area down; equal areas are tried together.
TILES = ((128, 64), (128, 32), (64, 64), (64, 32), (32, 32), (32, 16), (16, 16))
STAGES = (1, 2)


def warps_for(tile: tuple[int, int]) -> tuple[int, ...]:
    """Warps per program worth trying for a tile: enough rows per warp for a matrix op.
    ``--warps`` names the counts to try instead (gfx1151's f32 dots run on FMAs, whose
    operands a lane holds along the whole reduction: more warps hold less of them per lane)."""
    if WARPS_TRIED:
        return tuple(WARPS_TRIED)
    return (4, 8) if tile[0] >= 64 else (1, 2, 4)


# Kernel options a search may add (issue 24), each a LaunchConfig field: ``q_chunk`` (Q K^T
# over head-dim chunks, Q read per key block, so the query tile is not held in registers) and
# ``split_head_dim`` (programs per query tile, each with a slice of the accumulator). The
# default search tries neither; ``--q-chunk`` and ``--split`` name the values to try instead.
OPTIONS: list[dict[str, int]] = [{}]
STAGES_TRIED: list[int] = list(STAGES)
WARPS_TRIED: list[int] = []  # empty: warps_for's default per tile
TILES_TRIED: list[tuple[int, int]] = list(TILES)  # ``--tile`` narrows the search to these


def candidates(tile: tuple[int, int], arch: str) -> list[LaunchConfig]:
    wpe = None if arch == "sm90" else OCCUPANCY_TARGET  # waves_per_eu is an AMD hint
    return [
        LaunchConfig(tile[0], tile[1], num_warps=w, num_stages=s, waves_per_eu=wpe, **opt)
        for opt in OPTIONS
        for w in warps_for(tile)
        for s in STAGES_TRIED
    ]


def occupancy(m: dict[str, Any]) -> float:
    """Waves per SIMD on AMD; resident warps per SM sub-partition on sm90 (the same measure)."""
    occ = m["occupancy"]
    if "waves_per_simd" in occ:
        return occ["waves_per_simd"]
    return occ["blocks_per_sm"] * m["num_warps"] / SM90_SUBPARTITIONS


def registers(m: dict[str, Any]) -> int:
    """VGPRs (+ AGPRs) per lane on AMD, registers per thread on sm90."""
    return int(m["vgprs_total"] if "vgprs_total" in m else m["n_regs"])


def matrix_dtypes(arch: str) -> tuple[str, ...]:
    gate = next(g for g in COMPILE_GATES if g.arch == arch)
    return gate.matrix_dtypes if gate.matrix_dtypes is not None else DTYPES


def jobs_for(arch: str, config: LaunchConfig, d: int, dtype: str, margins: list[int]) -> list:
    out = []
    for causal in (True, False):
        for lse in (False, True):
            for margin in margins:
                qo, bh = C._CANONICAL
                shape = Shape(1, qo, qo, bh, bh // 2, d, dtype, causal)
                args, kwargs = C.launch_with(config, shape, margin, lse)
                key = {"causal": causal, "lse": lse, "margin": margin}
                out.append((key, C._specialise(arch, args, kwargs)))
    return out


def judge(arch: str, dtype: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    need_matrix = dtype in matrix_dtypes(arch)
    spills = sum(m["spills"] for m in metrics)
    over = sum(1 for m in metrics if m["lds_bytes"] > m["lds_limit_bytes"])
    no_matrix = sum(
        1 for m in metrics if not m["loops"] or any(lp["matrix"] == 0 for lp in m["loops"])
    )
    occ = min(occupancy(m) for m in metrics)
    clean = spills == 0 and over == 0 and (no_matrix == 0 or not need_matrix)
    return {
        "clean": clean,
        "spills": spills,
        "variants_over_lds": over,
        "variants_loop_without_matrix": no_matrix,
        "occupancy_min": occ,
        "registers_max": max(registers(m) for m in metrics),
        "lds_max": max(m["lds_bytes"] for m in metrics),
    }


def rank(entry: dict[str, Any]) -> tuple:
    cfg, verdict = entry["config"], entry["verdict"]
    return (
        min(verdict["occupancy_min"], OCCUPANCY_TARGET),
        cfg["block_m"] * cfg["block_n"],
        # Fewer programs computing the same softmax (a split recomputes Q K^T per slice), then
        # Q held in registers over Q read per key block, then larger chunks (fewer reads).
        -cfg.get("split_head_dim", 1),
        cfg.get("q_chunk", 0) == 0,
        cfg.get("q_chunk", 0),
        verdict["occupancy_min"],
        -cfg["num_stages"],
        -cfg["num_warps"],
    )


def verdicts(
    arch: str, d: int, dtype: str, margins: list[int], configs: list[LaunchConfig], workers: int
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Each config's verdict and per-variant figures under this process's compiler."""
    plan = [
        (cfg, key, job) for cfg in configs for key, job in jobs_for(arch, cfg, d, dtype, margins)
    ]
    metrics = C.compile_all([job for _, _, job in plan], workers)
    out, figures = [], []
    for cfg in configs:
        got = [m for (c, _, _), m in zip(plan, metrics, strict=True) if c == cfg]
        keys = [k for c, k, _ in plan if c == cfg]
        out.append(judge(arch, dtype, got))
        figures.append(
            [{**k, **{f: m.get(f) for f in ("spills", "lds_bytes", "scratch_bytes")},
              "registers": registers(m), "occupancy": occupancy(m),
              "loop_matrix": [lp["matrix"] for lp in m["loops"]]}
             for k, m in zip(keys, got, strict=True)]
        )  # fmt: skip
    return out, figures


JUDGE_MARK = "tune_amd_compile verdicts: "


def verdicts_under(
    python: str,
    arch: str,
    d: int,
    dtype: str,
    margins: list[int],
    configs: list[LaunchConfig],
    workers: int,
) -> tuple[str, list[dict[str, Any]]]:
    """(compiler, verdicts) of ``configs`` under the Triton that ``python`` imports: this tool
    run there with ``--judge``, so each compiler specialises its own launches."""
    request = {"arch": arch, "head_dim": d, "dtype": dtype, "margins": margins,
               "configs": [asdict(c) for c in configs], "workers": workers}  # fmt: skip
    done = subprocess.run(
        [python, __file__, "--judge", json.dumps(request)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(JUDGE_MARK)]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-12:])
        raise SystemExit(f"--also-under {python}: exit {done.returncode}\n{tail}")
    answer = json.loads(lines[-1][len(JUDGE_MARK) :])
    return answer["compiler"], answer["verdicts"]


def _judge_request(text: str) -> int:
    req = json.loads(text)
    configs = [LaunchConfig(**c) for c in req["configs"]]
    got, _ = verdicts(req["arch"], req["head_dim"], req["dtype"], req["margins"], configs,
                      req["workers"])  # fmt: skip
    answer = {"compiler": "triton " + C.compiler_version(), "verdicts": got}
    print(JUDGE_MARK + json.dumps(answer), flush=True)
    return 0


def search(
    arch: str, d: int, dtype: str, margins: list[int], workers: int, also: str | None = None
) -> dict[str, Any]:
    """The rule's pick for one cell; with ``also`` (another Python), a candidate is clean only
    when it is clean under both compilers, and both verdicts are recorded."""
    tried: list[dict[str, Any]] = []
    areas = sorted({m * n for m, n in TILES_TRIED}, reverse=True)
    for area in areas:
        configs = [c for t in TILES_TRIED if t[0] * t[1] == area for c in candidates(t, arch)]
        for cfg in configs:
            why = cannot_fit(arch, cfg, d, dtype)
            if why is not None:
                tried.append({"config": asdict(cfg), "label": C.config_label(cfg),
                              "verdict": {"clean": False, "pruned": why}})  # fmt: skip
        configs = [c for c in configs if cannot_fit(arch, c, d, dtype) is None]
        if not configs:
            continue
        here, figures = verdicts(arch, d, dtype, margins, configs, workers)
        there: list[dict[str, Any]] = [{} for _ in configs]
        if also is not None:
            other, there = verdicts_under(also, arch, d, dtype, margins, configs, workers)
            for v, o in zip(here, there, strict=True):
                v["under"] = {"triton " + C.compiler_version(): v["clean"], other: o["clean"]}
                v["other"] = {"compiler": other, **o}
                v["clean"] = v["clean"] and o["clean"]
        for cfg, verdict, figs in zip(configs, here, figures, strict=True):
            tried.append({"config": asdict(cfg), "label": C.config_label(cfg),
                          "verdict": verdict, "variants": figs})  # fmt: skip
        clean = [t for t in tried if t["verdict"]["clean"]]
        if any(t["verdict"]["occupancy_min"] >= OCCUPANCY_TARGET for t in clean):
            break
    return trimmed({"arch": arch, "head_dim": d, "dtype": dtype,
                    **choose(tried, dtype in matrix_dtypes(arch)), "candidates": tried})  # fmt: skip


def trimmed(res: dict[str, Any]) -> dict[str, Any]:
    """Per-variant figures kept for the picked candidate only; every other keeps its verdict."""
    pick = res["chosen"] or res["fallback"]
    for cand in res["candidates"]:
        if cand["label"] != pick:
            cand.pop("variants", None)
    return res


def choose(tried: list[dict[str, Any]], need_matrix: bool) -> dict[str, Any]:
    """The rule's pick among clean candidates; when none is clean, ``fallback`` is the one
    that spills least (its LDS fitting and, where required, its loops on the matrix units),
    which is shipped so the gate shows the spill rather than a config nobody compiled."""
    clean = [t for t in tried if t["verdict"]["clean"]]
    if clean:
        best = max(clean, key=rank)
        return {"chosen": best["label"], "chosen_config": best["config"], "fallback": None}
    usable = [
        t
        for t in tried
        if "pruned" not in t["verdict"]
        and t["verdict"]["variants_over_lds"] == 0
        and (not need_matrix or t["verdict"]["variants_loop_without_matrix"] == 0)
    ]
    least = min(usable, key=lambda t: (t["verdict"]["spills"], tuple(-x for x in rank(t))))
    return {"chosen": None, "chosen_config": least["config"], "fallback": least["label"]}


def _cell(text: str) -> tuple[str, int, str]:
    arch, d, dtype = text.split(":")
    if arch not in SEARCHED or dtype not in SEARCHED[arch]:
        raise argparse.ArgumentTypeError(f"{text}: not a searched (arch, dtype)")
    return arch, int(d), dtype


def _tile(text: str) -> tuple[int, int]:
    m, _, n = text.partition("x")
    if (int(m), int(n)) not in TILES:
        raise argparse.ArgumentTypeError(f"{text}: not one of TILES")
    return int(m), int(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--arch", action="append", choices=tuple(SEARCHED))
    parser.add_argument("--head-dim", type=int, action="append")
    parser.add_argument("--dtype", action="append", choices=DTYPES)
    parser.add_argument("--cell", action="append", metavar="ARCH:HEAD_DIM:DTYPE", type=_cell)
    parser.add_argument(
        "--also-under",
        metavar="PYTHON",
        help="a Python whose Triton must compile a candidate clean too (it runs this tool)",
    )
    parser.add_argument("--judge", metavar="JSON", help=argparse.SUPPRESS)  # --also-under's
    parser.add_argument("--all-margins", action="store_true", help="search both arms' margins")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument(
        "--q-chunk", type=int, action="append", help="try only candidates with this q_chunk"
    )
    parser.add_argument(
        "--split", type=int, action="append", help="with --q-chunk: split_head_dim values to try"
    )
    parser.add_argument("--stages", type=int, action="append", help="stage counts to try")
    parser.add_argument("--warps", type=int, action="append", help="warp counts to try")
    parser.add_argument(
        "--tile", type=_tile, action="append", metavar="MxN", help="tiles to try (of TILES)"
    )
    parser.add_argument(
        "--rechoose",
        type=Path,
        metavar="FILE",
        help="apply the rule to the candidates recorded in FILE (no compiling); write --out",
    )
    args = parser.parse_args(argv)
    if args.q_chunk or args.split:
        OPTIONS[:] = [
            {"q_chunk": qc, "split_head_dim": sp}
            for qc in (args.q_chunk or [0])
            for sp in (args.split or [1])
        ]
    if args.stages:
        STAGES_TRIED[:] = args.stages
    if args.warps:
        WARPS_TRIED[:] = args.warps
    if args.tile:
        TILES_TRIED[:] = [t for t in TILES if t in args.tile]
    if args.judge is not None:
        return _judge_request(args.judge)
    if args.out is None:
        parser.error("--out is required")
    if args.rechoose is not None:
        data = json.loads(args.rechoose.read_text(encoding="utf-8"))
        for res in data["results"]:
            res.update(choose(res["candidates"], res["dtype"] in matrix_dtypes(res["arch"])))
            trimmed(res)
            pick = res["chosen"] or f"none clean; fewest spills: {res['fallback']}"
            print(f"{res['arch']} d{res['head_dim']} {res['dtype']}: {pick}")
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    import os

    workers = args.workers or os.cpu_count() or 1
    started = time.time()
    results: list[dict[str, Any]] = []

    def write() -> None:  # after every search, so an interrupted run keeps what it found
        out = {
            "tool": "validate/tools/tune_amd_compile.py",
            "compiler": "triton " + C.compiler_version(),
            "host": platform.node(),
            "occupancy_target": OCCUPANCY_TARGET,
            "also_under": args.also_under,
            "options": OPTIONS,
            "stages": STAGES_TRIED,
            "warps": WARPS_TRIED or None,
            "tiles": TILES_TRIED,
            "seconds": round(time.time() - started, 1),
            "results": results,
        }
        args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    for arch in args.arch or sorted({c[0] for c in args.cell or ()}) or AMD_ARCHES:
        # The deferred arm's margin by default: the eager arm's code differs in one constant,
        # and `tether compile` then compiles both for every chosen config (the gates judge
        # both); --all-margins searches both where the map found the eager variant spilling.
        found = C.arm_margins(arch)
        margins = sorted(set(found.values()), reverse=True)
        if not args.all_margins:
            margins = [found[C.KERNEL_ARMS[0]]]
        for d in C.head_dims(arch):
            if args.cell and not any(c[:2] == (arch, d) for c in args.cell):
                continue
            if args.head_dim and d not in args.head_dim:
                continue
            for dtype in SEARCHED[arch]:
                if args.cell and (arch, d, dtype) not in args.cell:
                    continue
                if args.dtype and dtype not in args.dtype:
                    continue
                res = search(arch, d, dtype, margins, workers, args.also_under)
                res["margins"] = margins
                results.append(res)
                tried = len(res["candidates"])
                pick = res["chosen"] or f"none clean; fewest spills: {res['fallback']}"
                print(f"{arch} d{d} {dtype}: {pick} ({tried} tried)", flush=True)
                write()
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
