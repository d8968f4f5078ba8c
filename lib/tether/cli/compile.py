"""``tether compile``: what the compiler makes of every kernel variant, per arch, with no GPU.

For each arch with a compile target (default: all of them) each compiler the project's plugins
register (``tether.registry.compiler``) compiles every variant its arms launch and the verb writes one run of kind ``compile`` to the
store. A compile run already in the store for the same kernel fingerprint and compiler version
means there is nothing to compile (``--force`` compiles anyway); under ``[tool.tether.signing]
require`` only a run signed by an allowed signer counts, as only such a run is cited. The compile gates of the
policy are judged on each run and printed; ``validate/gates/test_compile_gates.py`` is where
they pass or fail.
"""

from __future__ import annotations

import argparse
from typing import Any

from tether import registry
from tether.cli import Context, Subparsers
from tether.errors import UsageError
from tether.freshness import CompileFreshness, fresh_compile_run
from tether.render.compiled import compile_gates
from tether.store import load_store, write_run
from tether.store.evidence import citable
from tether.store.results import CompileResults
from tether.store.signing import configured_signer, sign_written


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compile",
        help="compile every kernel variant for each GPU arch (no GPU needed) into compile runs",
    )
    p.add_argument(
        "--arch", action="append", metavar="ARCH", help="only this arch (repeatable; default: all)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="compile even when the store holds a run of this kernel fingerprint and compiler",
    )
    p.add_argument(
        "--workers", type=int, default=0, metavar="N", help="compiler processes (default: CPUs)"
    )
    p.set_defaults(handler=_compile)


def _gate_lines(run: Any, ctx: Context) -> None:

    for gate in compile_gates(ctx.root):
        if gate.arch != run.arch or gate.kernel != run.name:
            continue
        failing = gate.judge(run.cells)
        verdict = "passes" if not failing else f"{len(failing)} of {len(run.cells)} variants fail"
        print(f"  gate {gate.id}: {verdict}", file=ctx.out)
        for key, why in failing[:5]:
            label = " ".join(f"{k}={key[k]}" for k in sorted(key))
            print(f"    {label}: {'; '.join(why)}", file=ctx.out)


def _compile(args: argparse.Namespace, ctx: Context) -> int:

    compilers = list(registry.for_project(ctx.project).compilers.values())
    if not compilers:
        raise UsageError(
            "compile: no compiler registered by this project's plugins "
            "(a plugin registers one with tether.registry.compiler)"
        )
    configured_signer()  # a signing key set wrongly is said before minutes of compiling
    # Under [tool.tether.signing] require, an unsigned or forged compile run is no evidence:
    # it neither makes the arch up to date nor is its gate judged.
    runs = citable(ctx.root, load_store(ctx.store))
    for engine in compilers:
        _compile_with(engine, args, ctx, runs)
    return 0


def _compile_with(engine: Any, args: argparse.Namespace, ctx: Context, runs: list[Any]) -> None:

    arches = args.arch or list(engine.targets)
    unknown = [a for a in arches if a not in engine.targets]
    if unknown:
        raise UsageError(
            f"compile: {engine.name} has no compile target for {', '.join(unknown)}; "
            f"targets: {', '.join(engine.targets)}"
        )
    key = engine.key(ctx.root)
    describes = CompileFreshness(ctx.root)
    for arch in arches:
        fresh = (
            None
            if args.force
            else fresh_compile_run(describes, runs, engine.name, arch, key["compiler"])
        )
        if fresh is not None:
            print(f"compile {arch}: up to date, {fresh.id} ({key['compiler']})", file=ctx.out)
            _gate_lines(fresh, ctx)
            continue
        run = engine.compile_arch(arch, ctx.root, workers=args.workers or None, err=ctx.err)
        path = write_run(run, ctx.store)
        signed = sign_written(path, run.digest, ctx.project.allowed_signers)
        if signed is not None:
            print(f"compile {arch}: signed {signed}", file=ctx.out)
        r = CompileResults.from_json(run.results, path)
        print(
            f"compile {arch}: {r.variants} variants, {r.spills_total} registers spilled "
            f"in {r.variants_spilling}, {r.variants_over_lds} over the LDS, "
            f"{r.variants_loop_without_matrix} with a main loop without matrix instructions, "
            f"occupancy {r.occupancy_min}-{r.occupancy_max} {r.occupancy_unit}; "
            f"{r.seconds} s -> {path}",
            file=ctx.out,
        )
        _gate_lines(run, ctx)
