"""FIXTURE builders for tests: schema-valid runs with synthetic samples. Never results.

Everything here is made up on purpose (deterministic pseudo-random samples, a device called
``FIXTURE-GPU``, host ``fixture-host``) so that tests of the store, the renderer and the check
have realistic run files to work on. Write them only into ``tmp_path`` stores; nothing built
here may ever be committed under ``results/``.

    from validate.suite.runfactory import make_sweep_run, make_fixture_store
    run = make_sweep_run(store=tmp_path / "results")      # written, run.path set
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether.store import Cell, GuardRecord, Run, new_run, write_run

FIXTURE_DEVICE = "FIXTURE-GPU"
FIXTURE_HOST = "fixture-host"
FIXTURE_STARTED = "2026-01-01T00:00:00Z"
DEFAULT_AXES: dict[str, list[Any]] = {"batch": [1, 4], "hq": [16, 32], "seqlen": [256, 512]}
DEFAULT_FIXED: dict[str, Any] = {"hkv": 8, "head_dim": 128, "dtype": "f16", "causal": True}


# FIXTURE guard records: what a held run records (a made-up holder and idle snapshot).
FIXTURE_HOLDER = {"pid": 4242, "host": FIXTURE_HOST, "user": "fixture", "argv": ["fixture"]}
FIXTURE_SNAPSHOT = {"target": "cuda", "verdict": "idle", "loadavg": [0.0, 0.0, 0.0], "probes": []}
HELD = GuardRecord(
    mode="held", lock="/tmp/fixture.lock", holder=FIXTURE_HOLDER, before=FIXTURE_SNAPSHOT,
    after=FIXTURE_SNAPSHOT,
)  # fmt: skip
UNGUARDED = GuardRecord(mode="unguarded", reason="FIXTURE: run with --unguarded")
REFUSED = GuardRecord(mode="refused", reason="FIXTURE: host busy")


def fixture_flops(key: Mapping[str, Any], fixed: Mapping[str, Any]) -> float:
    """Causal attention FLOPs for the key (synthetic inputs only; the real formula is kernels')."""
    batch = int(key.get("batch", 1))
    hq = int(key.get("hq", fixed.get("hq", 16)))
    seqlen = int(key.get("seqlen", fixed.get("seqlen", 256)))
    head_dim = int(fixed.get("head_dim", 128))
    causal = 0.5 if fixed.get("causal", True) else 1.0
    return 4.0 * batch * hq * seqlen * seqlen * head_dim * causal


def fixture_reach(key: Mapping[str, Any], arm: str = "triton") -> dict[str, Any]:
    """Synthetic reachability: batch 1 is reachable from both entry points, else batch only."""
    eps = ["batch_prefill", "single_prefill"] if key.get("batch", 1) == 1 else ["batch_prefill"]
    return {"entry_points": eps, "routes": {ep: arm for ep in eps}}


def _samples(rng: random.Random, mean: float, noise: float, n: int) -> tuple[float, ...]:
    return tuple(mean * (1.0 + rng.uniform(-noise, noise)) for _ in range(n))


def make_cell(
    key: Mapping[str, Any],
    *,
    work: float = 1.0e9,
    means: Mapping[str, float] | None = None,
    noise: float = 0.01,
    n: int = 5,
    blocks: int = 2,
    seed: int = 0,
    flags: Sequence[str] = (),
    reach: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Cell:
    """One cell; ``means`` maps role -> mean seconds per call (default A, A2, B); ``n``
    samples per role in each of ``blocks`` replicate blocks."""
    rng = random.Random(f"{seed}:{sorted(key.items())}")
    roles = dict(means or {"A": 1.0e-4, "A2": 1.0e-4, "B": 0.9e-4})
    kernel_names = {"A": "fixture_kernel_a", "A2": "fixture_kernel_a", "B": "_attn_fwd"}
    return Cell(
        key=dict(key),
        work=float(work),
        samples={role: _samples(rng, mean, noise, n * blocks) for role, mean in roles.items()},
        blocks=(n,) * blocks if blocks > 1 else (),
        kernels={role: (kernel_names.get(role, f"fixture_{role.lower()}"),) for role in roles},
        reach=dict(reach) if reach is not None else fixture_reach(key),
        flags=tuple(flags),
        extra=dict(extra or {}),
    )


def grid_cells(
    axes: Mapping[str, Sequence[Any]],
    fixed: Mapping[str, Any],
    *,
    ratio: float = 0.9,
    noise: float = 0.01,
    n: int = 5,
    seed: int = 0,
    roles: Iterable[str] = ("A", "A2", "B"),
    per_cell_ratio: Mapping[tuple[Any, ...], float] | None = None,
) -> tuple[Cell, ...]:
    """Cells for the full product of ``axes``; B's time is A's times ``ratio`` (per cell override)."""
    names = list(axes)
    cells = []
    for values in itertools.product(*(axes[a] for a in names)):
        key = dict(zip(names, values, strict=True))
        flops = fixture_flops(key, fixed)
        a_mean = flops / 2.0e14  # a plausible time scale so throughput-like values are sane
        r = (per_cell_ratio or {}).get(tuple(values), ratio)
        means = {"A": a_mean, "A2": a_mean, "B": a_mean * r}
        cells.append(
            make_cell(
                key,
                work=flops,
                means={role: means[role] for role in roles},
                noise=noise,
                n=n,
                seed=seed,
            )
        )
    return tuple(cells)


def resealed(run: Run, **changes: Any) -> Run:
    """FIXTURE: ``run`` with ``changes`` applied (any Run field; ``provenance`` may be a dict
    of Provenance fields to change) and its content-addressed id recomputed, as if the
    harness had written it that way."""
    from tether.store.provenance import make_id

    prov = changes.pop("provenance", None)
    if isinstance(prov, Mapping):
        changes["provenance"] = replace(run.provenance, **prov)
    elif prov is not None:
        changes["provenance"] = prov
    draft = replace(run, **changes)
    return replace(
        draft,
        id=make_id(draft.kind, draft.name, draft.arch, draft.started, draft.digest),
        path=None,
    )


def with_b_faster(run: Run, index: int, factor: float) -> Run:
    """FIXTURE: ``run`` with cell ``index``'s B samples ``factor`` times faster, resealed."""
    cells = list(run.cells)
    c = cells[index]
    cells[index] = replace(c, samples={**c.samples, "B": tuple(x / factor for x in c.samples["B"])})
    return resealed(run, cells=tuple(cells))


def _finish(run: Run, store: Path | None) -> Run:
    if store is None:
        return run
    return replace(run, path=write_run(run, store))


def make_sweep_run(
    *,
    name: str = "prefill-vs-sdpa",
    arch: str = "sm90",
    axes: Mapping[str, Sequence[Any]] | None = None,
    fixed: Mapping[str, Any] | None = None,
    ratio: float = 0.9,
    noise: float = 0.01,
    n: int = 5,
    seed: int = 0,
    cells: Sequence[Cell] | None = None,
    status: str = "ok",
    reason: str | None = None,
    started: str = FIXTURE_STARTED,
    device: str = FIXTURE_DEVICE,
    arms: Mapping[str, str] | None = None,
    guard: GuardRecord = HELD,
    kind: str = "sweep",
    git_sha: str | None = None,
    store: Path | None = None,
    root: Path | None = None,
) -> Run:
    """A sweep FIXTURE over the product of ``axes`` with A, A2 (A/A control) and B samples."""
    ax = {k: list(v) for k, v in (axes if axes is not None else DEFAULT_AXES).items()}
    fx = dict(fixed if fixed is not None else DEFAULT_FIXED)
    if cells is None:
        cells = (
            () if status != "ok" else grid_cells(ax, fx, ratio=ratio, noise=noise, n=n, seed=seed)
        )
    run = new_run(
        kind,
        name,
        arch=arch,
        device=device,
        host=FIXTURE_HOST,
        config={
            "grid": {"axes": ax, "fixed": fx},
            "arms": dict(arms or {"A": "sdpa_flash", "B": "triton"}),
            "case": "attention",
            "unit": "FLOP",
            "aliases": {"seqlen": ["qo_len", "kv_len"]},
            "entry_points": ["single_prefill", "batch_prefill"],
            "timing": {"warmup": 3, "reps": n},
        },
        status=status,
        reason=reason,
        cells=cells,
        started=started,
        root=root,
        guard=guard,
    )
    if git_sha is not None:  # another commit's run (a nightly of another day, say)
        run = resealed(run, provenance={"git_sha": git_sha})
    return _finish(run, store)


def make_gate_run(
    *,
    name: str = "gate-prefill",
    arch: str = "sm90",
    threshold: float = 100.0e12,
    measured: float = 120.0e12,
    call: Mapping[str, Any] | None = None,
    policy: str = "kernels/policy.py GATES gate-prefill",
    started: str = FIXTURE_STARTED,
    n: int = 5,
    seed: int = 0,
    flags: Sequence[str] = (),
    guard: GuardRecord = HELD,
    store: Path | None = None,
    root: Path | None = None,
) -> Run:
    """A gate FIXTURE: one B cell whose samples run at ``measured`` work per second."""
    key = dict(call or {"seqlen": 4096})
    work = 1.0e12
    cell = make_cell(
        key, work=work, means={"B": work / measured}, noise=0.0, n=n, seed=seed, flags=flags
    )
    run = new_run(
        "gate",
        name,
        arch=arch,
        device=FIXTURE_DEVICE,
        host=FIXTURE_HOST,
        config={
            "grid": {"axes": {k: [v] for k, v in key.items()}, "fixed": {}},
            "arms": {"B": "triton"},
            "unit": "FLOP",
        },
        cells=(cell,),
        results={
            "threshold": float(threshold),
            "gate": name,
            "shape": " ".join(f"{k}={v}" for k, v in sorted(key.items())),
            "policy": policy,
        },
        started=started,
        root=root,
        guard=guard,
    )
    return _finish(run, store)


def make_probe_run(
    *,
    name: str = "probe-prefill",
    arch: str = "sm90",
    bounds: Mapping[str, float] | None = None,
    started: str = FIXTURE_STARTED,
    store: Path | None = None,
    root: Path | None = None,
) -> Run:
    """A probe FIXTURE: B samples for two calls (f16, bf16) plus dense-matmul bounds measured
    alongside, one per dtype (``bounds``: label -> work per second)."""
    rates = dict(bounds or {"f16": 700.0e12, "bf16": 650.0e12})
    cells = tuple(
        make_cell({"dtype": d}, work=1.0e12, means={"B": 5.0e-3}, seed=i)
        for i, d in enumerate(("f16", "bf16"))
    )
    work = 2.0 * 8192**3
    run = new_run(
        "probe",
        name,
        arch=arch,
        device=FIXTURE_DEVICE,
        host=FIXTURE_HOST,
        config={
            "grid": {"axes": {"dtype": ["f16", "bf16"]}, "fixed": {"seqlen": 4096}},
            "arms": {"B": "triton"},
            "unit": "FLOP",
            "bound_field": "dtype",
        },
        cells=cells,
        results={
            "bounds": {
                label: {
                    "work": work,
                    "samples": [work / rate] * 3,
                    "what": f"FIXTURE dense matmul {label}",
                }
                for label, rate in rates.items()
            }
        },
        started=started,
        root=root,
        guard=HELD,
    )
    return _finish(run, store)


def make_verify_run(
    *,
    name: str = "verify-kernels",
    arch: str = "cpu",
    passed: int = 10,
    failed: int = 0,
    skipped: int = 0,
    errors: int = 0,
    vendor: str = "cpu",
    complete: bool = True,
    started: str = FIXTURE_STARTED,
    store: Path | None = None,
    root: Path | None = None,
) -> Run:
    """A verify FIXTURE: pytest outcome counts, no cells."""
    run = new_run(
        "verify",
        name,
        arch=arch,
        device="cpu: fixture" if arch == "cpu" else FIXTURE_DEVICE,
        host=FIXTURE_HOST,
        status="ok" if failed == errors == 0 else "rejected",
        reason=None if failed == errors == 0 else f"FIXTURE: {failed} failed, {errors} errors",
        config={},
        results={
            "passed": passed,
            "failed": failed,
            "skipped": skipped,
            "errors": errors,
            "duration_s": 1.5,
            "suite": "validate/kernels",
            "vendor": vendor,
            "workers": 2,
            "complete": complete,
        },
        started=started,
        root=root,
        guard=HELD,
    )
    return _finish(run, store)


def make_not_measured_run(
    *,
    kind: str = "sweep",
    name: str = "prefill-vs-sdpa",
    arch: str = "sm90",
    reason: str = "host busy: guard lock held by another session",
    started: str = FIXTURE_STARTED,
    store: Path | None = None,
    root: Path | None = None,
) -> Run:
    """A not_measured FIXTURE: status, reason, no cells, no results."""
    config: dict[str, Any] = {}
    if kind == "sweep":
        config = {"grid": {"axes": {}, "fixed": {}}, "arms": {"A": "sdpa_flash", "B": "triton"}}
    run = new_run(
        kind,
        name,
        arch=arch,
        device=FIXTURE_DEVICE,
        host=FIXTURE_HOST,
        config=config,
        status="not_measured",
        reason=reason,
        started=started,
        root=root,
        guard=REFUSED,
    )
    return _finish(run, store)


def make_fixture_store(store: Path, *, root: Path | None = None) -> list[Run]:
    """A small mixed FIXTURE store: two sweeps (older, newer), a gate, a probe, a verify, a
    not_measured sweep. Returns the written runs in write order."""
    return [
        make_sweep_run(started="2026-01-01T00:00:00Z", ratio=0.95, store=store, root=root),
        make_sweep_run(started="2026-01-02T00:00:00Z", ratio=0.9, store=store, root=root),
        make_gate_run(started="2026-01-02T01:00:00Z", store=store, root=root),
        make_probe_run(started="2026-01-02T02:00:00Z", store=store, root=root),
        make_verify_run(started="2026-01-02T03:00:00Z", store=store, root=root),
        make_not_measured_run(
            arch="gfx942", started="2026-01-03T00:00:00Z", store=store, root=root
        ),
    ]


# FIXTURE: where write_conservative_policy puts the policy files, for a fixture checkout's
# [tool.tether] policy (the real project lists its routing thresholds and its gates).
CONSERVATIVE_POLICY = ("kernels/policy.py", "kernels/gates.py")


def write_conservative_policy(root: Path) -> Path:
    """FIXTURE: the real policy files (kernels/tether_kernels/policy.py and gates.py) with
    every threshold and gate unset, written to ``root`` at CONSERVATIVE_POLICY's paths; returns
    the routing file's path.

    A fixture checkout has a fixture store, which holds none of the runs the real policy
    cites; the checkout's policy therefore starts where every arch starts, unmeasured.
    The rewrite is textual and checked: if the policy's layout changes, this fails loudly.
    """
    import re

    real = Path(__file__).resolve().parents[2] / "kernels" / "tether_kernels"
    source = (real / "policy.py").read_text(encoding="utf-8")
    # Thresholds built by the helpers take their lower bound positionally; those written out
    # in full (sm90's) name what they take.
    text, n_helpers = re.subn(
        r'(_(?:chunked_)?threshold\(\s*"\w+", "\w+", )(?:\d+|None)(?=[,)])', r"\1None", source
    )
    # A takes tuple on one line, of one condition or several: takes=(("qo_len", ">=", 128),)
    # or takes=(("batch", ">=", 2), ("qo_len", ">=", 256)).
    text, n_takes = re.subn(r"\btakes=\((?:\([^()\n]*\),?\s*)+\),", "takes=None,", text)
    gates, n_gates = re.subn(
        r"\bthreshold=(?:[0-9.e]+|None),",
        "threshold=None,",
        (real / "gates.py").read_text(encoding="utf-8"),
    )
    gates = re.sub(r"\n\s*(?:before_run|after_run|before_role|after_role)=[^\n]*,", "", gates)
    unset = not re.search(r"\btakes=\(|\bthreshold=[0-9]", text + gates)
    if not (n_helpers and n_takes and n_gates and unset):
        raise AssertionError("FIXTURE: policy.py layout changed; update write_conservative_policy")
    target = root / CONSERVATIVE_POLICY[0]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    (root / CONSERVATIVE_POLICY[1]).write_text(gates, encoding="utf-8")
    return target
