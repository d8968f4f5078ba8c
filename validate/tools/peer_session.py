"""FlashInfer on the H200: build (or restore) its modules, check its arms.

Run through ``validate/tools/peer_session.sh``, which installs the slim FlashInfer from ``.peers/``
and sets the paths::

    bash validate/tools/peer_session.sh [--skip-pytest]

1. FlashInfer's fa3 and fa2 single-prefill modules for bf16 and f16 at head_dim 128, built in
   one ninja (``MAX_JOBS`` jobs), or found restored from ``.peers/fi-jit-sm90.tar.xz``; timed.
2. The four modules packed into ``$OUT/fi-jit-sm90.tar.xz`` (copy it into ``.peers/`` so the
   next session skips the build).
3. Both arms and tether's Triton arm against the f32 reference on a few shapes (a table).
4. ``validate/correctness/test_peers.py`` under pytest (the suite's own check).

The sweeps that measure FlashInfer (``chunked-prefill-fa3``, ``square-prefill-fa3``) are
ordinary ``tether sweep`` runs, held by the guard, run with FlashInfer on the path.

Writes ``$OUT/peer_session.json`` and prints a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "fi-jit-sm90.tar.xz"
BUILD_DTYPES = ("bf16", "f16")
BUILD_HEAD_DIMS = (128,)


def _specs(kind: str, dtypes: Any, head_dims: Any, backends: Any) -> list[Any]:
    """FlashInfer's JIT specs of one kind of module, as tether's arms call them: no RoPE, no
    window, no soft cap, f32 QK. ``single``: what ``single_prefill_with_kv_cache`` asks for;
    ``batch``: what the ragged wrapper (``BatchPrefillWithRaggedKVCacheWrapper``) asks for as
    ``tether_kernels.peers`` plans it (int32 offsets)."""
    import torch
    from flashinfer.jit import gen_batch_prefill_module, gen_single_prefill_module

    specs = []
    for backend in backends:
        for name in dtypes:
            dt = {"bf16": torch.bfloat16, "f16": torch.float16}[name]
            for d in head_dims:
                if kind == "batch":
                    args = (backend, dt, dt, dt, torch.int32, d, d, 0, False, False, False)
                    specs.append(gen_batch_prefill_module(*args))
                else:
                    specs.append(
                        gen_single_prefill_module(backend, dt, dt, dt, d, d, 0, False, False, False)
                    )
    return specs


def module_specs(
    dtypes=BUILD_DTYPES, head_dims=BUILD_HEAD_DIMS, backends=("fa3", "fa2")
) -> list[Any]:
    """The single-prefill modules the arms call (see ``_specs``)."""
    return _specs("single", dtypes, head_dims, backends)


def batch_module_specs(dtypes=("bf16",), head_dims=(64, 128, 256), backends=("fa3",)) -> list[Any]:
    """The modules FlashInfer's batch wrappers ask for (see ``_specs``): one module serves both
    the ragged and the paged wrapper (its ``ragged_run`` and ``paged_run``), bf16 at the
    catalog's head_dims that fa3 instantiates, what api-ragged-fa3 and api-paged-fa3 call."""
    return _specs("batch", dtypes, head_dims, backends)


def session_specs() -> list[Any]:
    """Every module an evidence session calls, its sweeps and its verify (ci/h200-session.sh
    builds them before the hold, so no guarded step spends its time limit in a JIT build, and
    a host given the runtime archive, which cannot build, finds them all): single prefill fa3
    at head_dim 64, 128 and 256 in bf16 and f16 (the model catalog's sweeps, api-models-fa3),
    fa2 at 64 and 128 in both (the suite's test_arms calls both peers at head_dim 64: on
    2026-12-03 its fa2 cases failed on a host that had no headers to build them), and the
    batch wrappers' fa3 modules (api-ragged-fa3, api-paged-fa3) at 64, 128 and 256 in bf16 and
    at 128 in f16. FlashInfer's fa3 instantiates no head_dim 96 (a static_assert in its
    hopper/prefill_sm90.cuh: 64, 128 or 256)."""
    specs = module_specs(head_dims=(64, 128, 256), backends=("fa3",))
    specs += module_specs(head_dims=(64, 128), backends=("fa2",))
    return specs + batch_module_specs() + batch_module_specs(dtypes=("f16",), head_dims=(128,))


# Files back from a lent host are 16 MiB at most: a larger archive comes back in parts
# (ARCHIVE.00, .01, ...), which validate/peer_env.sh joins in name order.
PART_BYTES = 15 * 1024 * 1024


def split_archive(archive: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """``archive`` itself when it fits, else its parts (the whole archive removed)."""
    size = archive.stat().st_size
    if size <= part_bytes:
        return [archive]
    parts = []
    with archive.open("rb") as src:
        for i in range(-(-size // part_bytes)):
            part = archive.with_name(f"{archive.name}.{i:02d}")
            part.write_bytes(src.read(part_bytes))
            parts.append(part)
    archive.unlink()
    return parts


def pack(archive: Path, paths: dict[str, Path]) -> None:
    """``archive``: each module as ``<name>/<name>.so`` (the layout FlashInfer loads from
    data/aot), xz-compressed on every core where an ``xz`` program is found: Python's own
    single-threaded xz ran the prebuild step past its limit at 690a884."""
    xz = shutil.which("xz")
    if xz is None:
        with tarfile.open(archive, "w:xz") as tar:
            for name, path in sorted(paths.items()):
                tar.add(path, arcname=f"{name}/{name}.so")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in sorted(paths.items()):
            (Path(tmp) / name).mkdir()
            os.symlink(path, Path(tmp) / name / f"{name}.so")
        names = sorted(paths)
        tar = subprocess.Popen(["tar", "-chf", "-", "-C", tmp, *names], stdout=subprocess.PIPE)
        with archive.open("wb") as dst:
            done = subprocess.run(
                [xz, "-T0", "-3", "-c"], stdin=tar.stdout, stdout=dst, check=False
            )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or done.returncode != 0:
            raise RuntimeError(
                f"packing {archive} failed: tar {tar.returncode}, xz {done.returncode}"
            )


def build_modules(out: Path, specs: list[Any] | None = None) -> dict[str, Any]:
    """Build (or find restored) the modules in one ninja (``specs``, default
    ``module_specs()``); pack them into ``out/ARCHIVE``."""
    import flashinfer
    from flashinfer.jit import build_jit_specs

    specs = module_specs() if specs is None else specs
    restored = sorted(s.name for s in specs if s.is_aot)
    t0 = time.perf_counter()
    build_jit_specs(specs, verbose=False)  # skips the restored ones (their aot path exists)
    build_s = time.perf_counter() - t0
    paths = {s.name: Path(s.get_library_path()) for s in specs}
    missing = sorted(n for n, p in paths.items() if not p.exists())
    if missing:
        raise RuntimeError(f"FlashInfer modules missing after the build: {missing}")
    archive = out / ARCHIVE
    pack(archive, paths)
    archive_bytes = archive.stat().st_size
    parts = split_archive(archive)
    return {
        "flashinfer": flashinfer.__version__,
        "build_s": round(build_s, 1),
        "max_jobs": os.environ.get("MAX_JOBS"),
        "modules": sorted(paths),
        "restored": restored,
        "archive": {"paths": [str(p) for p in parts], "bytes": archive_bytes},
    }


CHECK_SHAPES = (
    # (batch, qo, kv, hq, hkv, d, causal)
    (1, 256, 1024, 8, 2, 128, True),
    (1, 300, 300, 4, 4, 128, True),
    (1, 200, 333, 8, 1, 128, False),
    (1, 2048, 8192, 32, 8, 128, True),
)


def check_arms(arms=("flashinfer_fa3", "flashinfer_fa2", "triton")) -> list[dict[str, Any]]:
    """Each arm's max error against the f32 reference, and the suite's tolerance for it."""
    import torch
    from tether_kernels import Shape
    from tether_kernels.arms import attention_ref, get_arm

    from validate.correctness._helpers import (
        ABS_EPS,
        make_qkv,
        max_err,
        rounding_bound,
        score_eps,
    )

    rows = []
    for dtype in BUILD_DTYPES:
        for b, qo, kv, hq, hkv, d, causal in CHECK_SHAPES:
            shape = Shape(b, qo, kv, hq, hkv, d, dtype, causal)
            q, k, v = make_qkv(shape, seed=qo * 7 + kv)
            ref = attention_ref(q, k, v, causal)
            base = get_arm("sdpa_math").prepare(q, k, v, shape, arch="sm90")()
            tol = (
                2 * max(max_err(base, ref), rounding_bound(q, k, v, causal))
                + ABS_EPS
                + score_eps(q, k, v)
            )
            for name in arms:
                res = get_arm(name).prepare(q, k, v, shape, arch="sm90")()
                err = max_err(res, ref)
                ok = bool(torch.isfinite(res).all()) and err <= tol
                rows.append({"arm": name, "shape": shape.key(), "err": err, "tol": tol, "ok": ok})
            del ref, base
            torch.cuda.empty_cache()
    return rows


def run_pytest(timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    cmd.append("validate/correctness/test_peers.py")
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"rc": None, "tail": f"timed out after {timeout_s:.0f} s"}
    return {"rc": done.returncode, "tail": (done.stdout + done.stderr).strip()[-1500:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    out = Path(os.environ.get("OUT", "/tmp/peer-out"))
    ap.add_argument("--skip-pytest", action="store_true")
    ap.add_argument(
        "--build-only",
        action="store_true",
        help="build (or restore) every module an evidence session calls (session_specs), "
        "pack them into $OUT, and stop: no check, no pytest",
    )
    ap.add_argument(
        "--check-restored",
        action="store_true",
        help="exit 1, building nothing, unless every module of session_specs loads from the "
        "archive carried in .peers/ (validate/peer_env.sh restores it): a JIT build inside a "
        "timed step runs it past its limit",
    )
    args = ap.parse_args(argv)
    if args.check_restored:
        specs = session_specs()
        missing = sorted(s.name for s in specs if not s.is_aot)
        print(f"peer_session: {len(specs) - len(missing)} of {len(specs)} modules restored"
              + (f"; not restored: {', '.join(missing)}" if missing else ""))  # fmt: skip
        return 1 if missing else 0
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    report: dict[str, Any] = {}
    report["build"] = build = build_modules(out, session_specs() if args.build_only else None)
    print(f"peer_session: FlashInfer {build['flashinfer']} modules ready in "
          f"{build['build_s']} s (restored: {len(build['restored'])} of "
          f"{len(build['modules'])}); archive {build['archive']['bytes']} bytes",
          file=sys.stderr, flush=True)  # fmt: skip
    if args.build_only:
        print(json.dumps(build, default=str))
        return 0
    report["check"] = rows = check_arms()
    if not args.skip_pytest:
        report["pytest"] = run_pytest(timeout_s=240.0)
    report["elapsed_s"] = round(time.monotonic() - t0, 1)
    (out / "peer_session.json").write_text(json.dumps(report, indent=1, default=str) + "\n")

    print(f"{'arm':<16} {'dtype':<5} {'shape (qo x kv, hq/hkv, causal)':<34} {'err':>9} "
          f"{'tol':>9} ok")  # fmt: skip
    for r in rows:
        s = r["shape"]
        desc = f"{s['qo_len']} x {s['kv_len']}, {s['hq']}/{s['hkv']}, {s['causal']}"
        print(f"{r['arm']:<16} {s['dtype']:<5} {desc:<34} {r['err']:>9.2e} {r['tol']:>9.2e} "
              f"{'yes' if r['ok'] else 'NO'}")  # fmt: skip
    if "pytest" in report:
        last = report["pytest"]["tail"].splitlines()[-1:] or [""]
        print(f"pytest test_peers.py: rc {report['pytest']['rc']}: {last[0]}")
    print(f"peer_session: {report['elapsed_s']} s; build {build['build_s']} s; "
          f"$OUT/{ARCHIVE} and $OUT/peer_session.json written")  # fmt: skip
    ok = all(r["ok"] for r in rows) and report.get("pytest", {"rc": 0})["rc"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
