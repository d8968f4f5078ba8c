"""Sweeps end to end on the CPU: a valid run in a tmp store, replicate blocks, fidelity flags,
Ctrl-C, refusals, the guard record, and the CLI's knobs."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tether import registry
from tether.bench.engine import TimingPolicy
from tether.bench.sweep import Bench, Target
from tether.registry import Registry, Sweep
from tether.store import load_run, load_store

ROOT = Path(__file__).resolve().parents[2]
CPU = Target("cpu", "cpu", "cpu: test fixture")
# Fixture policy: the fewest samples that still exercise interleaving and the A/A control.
QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)


def real() -> Registry:
    return registry.load(["tether_kernels_plugin"])


def quick(sweep: Sweep) -> Sweep:
    return sweep.replace(timing=QUICK)


def bench(store: Path, reg: Registry | None = None, **kw: Any) -> Bench:
    return Bench(ROOT, store, reg or real(), CPU, unguarded_reason="FIXTURE: unit test", **kw)


def test_every_registered_sweep_names_its_case_and_arms() -> None:
    reg = real()
    for required in ("prefill-vs-sdpa", "chunked-prefill", "cpu-demo", "aa-release-demo"):
        assert required in reg.sweeps
    for name, sweep in reg.sweeps.items():
        assert sweep.name == name and sweep.case in reg.cases
        assert {"A", "B"} <= set(sweep.arms) and sweep.unit == "FLOP"
    assert len(reg.get_sweep("prefill-vs-sdpa").keys()) == 60


def test_cpu_demo_sweep_end_to_end_loads_and_validates(tmp_path: Path) -> None:
    sweep = quick(real().get_sweep("cpu-demo"))
    run = bench(tmp_path).sweep(sweep)
    files = list((tmp_path / "cpu").glob("*.json"))
    assert len(files) == 1
    loaded = load_run(files[0])
    assert loaded.status == "ok" and loaded.id == run.id
    assert len(loaded.cells) == len(sweep.keys()) == 6
    assert loaded.config["arms"] == {"A": "sdpa_math", "B": "sdpa_flash"}
    assert loaded.config["timing"] == QUICK.to_json() and loaded.config["unit"] == "FLOP"
    assert loaded.guard.mode == "unguarded" and not loaded.evidence_grade
    for cell in loaded.cells:
        assert set(cell.samples) == {"A", "A2", "B"}
        assert cell.work > 0
        # Two replicate blocks (the sweep's default), three repetitions each.
        assert cell.blocks == (3, 3) and all(len(v) == 6 for v in cell.samples.values())
        assert "single_prefill" in cell.reach["entry_points"]
        assert any("flash_attention" in k for k in cell.kernels["B"])
        assert len(cell.extra["blocks"]) == 2


def test_replicates_override_and_a_single_block(tmp_path: Path) -> None:
    sweep = quick(real().get_sweep("cpu-demo")).replace(axes={"hq": (2,), "seqlen": (64,)})
    (cell,) = bench(tmp_path, replicates=1).sweep(sweep).cells
    assert cell.blocks == () and len(cell.samples["A"]) == 3
    (cell,) = bench(tmp_path, replicates=3).sweep(sweep).cells
    assert cell.blocks == (3, 3, 3)


def test_a_stray_kernel_flags_the_cell(tmp_path: Path) -> None:
    # Fixture: a fake profile in which every arm also launched a mask-building kernel.
    def profiler(fn: object, device: str) -> list[str]:
        return ["aten::_scaled_dot_product_attention_math", "aten::triu"]

    sweep = quick(real().get_sweep("cpu-demo")).replace(axes={"hq": (2,), "seqlen": (64,)})
    (cell,) = bench(tmp_path, profiler=profiler).sweep(sweep).cells
    assert "kernel_mismatch" in cell.flags
    assert cell.extra["unexpected_kernels"]["A"] == ["aten::triu"]
    # B (flash) did not run its own kernel at all in this fake profile: both names are strays.
    assert "aten::_scaled_dot_product_attention_math" in cell.extra["unexpected_kernels"]["B"]


@dataclass(frozen=True)
class FakeCase:
    """Fixture case: no tensors, a made-up amount of work."""

    key: dict[str, Any]
    work: float = 1.0e6

    def fields(self) -> dict[str, Any]:
        return dict(self.key)

    def inputs(self, device: str, seed: int) -> int:
        return seed

    def reach(self, arch: str) -> dict[str, Any]:
        return {}


@dataclass
class FakeArm:
    """Fixture arm: a no-op call; raises KeyboardInterrupt once ``interrupt_at`` cells passed."""

    name: str
    interrupt_at: int | None = None
    unavailable: str | None = None
    prepared: list[int] = field(default_factory=list)
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: object, arch: str) -> str | None:
        return self.unavailable

    def prepare(self, case: Any, inputs: Any, arch: str) -> Any:
        self.prepared.append(1)
        per_cell = (2 if self.name == "fake_a" else 1) * QUICK.buffer_sets  # A and A2 share it
        cell = (len(self.prepared) - 1) // per_cell
        stop = self.interrupt_at is not None and cell >= self.interrupt_at

        def call() -> None:
            if stop:
                raise KeyboardInterrupt

        return call

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return (r".",)


def fake_registry(**arms: FakeArm) -> Registry:
    reg = Registry()
    reg.cases["fake"] = lambda fields: FakeCase(dict(fields))
    for name, arm in arms.items():
        reg.arms[name] = arm
    return reg


def fake_sweep() -> Sweep:
    return Sweep(
        name="fake",
        case="fake",
        axes={"seqlen": (8, 16, 32)},
        fixed={"batch": 1},
        arms={"A": "fake_a", "B": "fake_b"},
        timing=QUICK,
        needs_gpu=False,
        replicates=1,
        unit="rows",
    )


def test_a_free_form_sweep_in_its_own_unit(tmp_path: Path) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    run = bench(tmp_path, reg, profiler=lambda fn, dev: ["x"]).sweep(fake_sweep())
    assert run.status == "ok" and run.unit == "rows" and run.cells[0].work == 1.0e6
    assert load_store(tmp_path)[0].config["unit"] == "rows"


def test_the_run_records_the_sweeps_aliases(tmp_path: Path) -> None:
    # An H200 session measured prefill-vs-sdpa without them: every population on qo_len
    # found no cell (seqlen stands for qo_len and kv_len only through the aliases).
    from tether.policy import Population
    from tether.stats import aggregate, cell_stats

    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    sweep = fake_sweep().replace(aliases={"seqlen": ("qo_len", "kv_len")})
    bench(tmp_path, reg, profiler=lambda fn, dev: ["x"]).sweep(sweep)
    (run,) = load_store(tmp_path)
    assert run.aliases == {"seqlen": ["qo_len", "kv_len"]}
    long = Population(name="long", where=(("qo_len", ">=", 16),))
    assert len(aggregate(cell_stats(run), long).cells) == 2


def test_ctrl_c_writes_a_rejected_partial_run_and_propagates(tmp_path: Path) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b", interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        bench(tmp_path, reg, profiler=lambda fn, dev: ["x"]).sweep(fake_sweep())
    (run,) = load_store(tmp_path)
    assert run.status == "rejected"
    assert run.reason == "interrupted after 2 of 3 cell blocks"
    assert run.config["grid"]["axes"] == {}
    assert [c.key for c in run.cells] == [{"seqlen": 8}, {"seqlen": 16}]


def test_an_arm_that_cannot_serve_a_cell_rejects_the_run(tmp_path: Path) -> None:
    reg = fake_registry(
        fake_a=FakeArm("fake_a", unavailable="no GQA here"), fake_b=FakeArm("fake_b")
    )
    run = bench(tmp_path, reg).sweep(fake_sweep())
    assert run.status == "rejected"
    assert "no GQA here" in str(run.reason)
    assert load_store(tmp_path)[0].id == run.id


def test_an_unregistered_candidate_is_passed_over_with_its_reason(tmp_path: Path) -> None:
    from tether.bench.sweep import resolve_arms

    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    sweep = fake_sweep().replace(arms={"A": ("peer_not_installed", "fake_a"), "B": "fake_b"})
    assert resolve_arms(sweep, [FakeCase({"seqlen": 8})], "cpu", reg)["A"] == "fake_a"


def test_each_role_is_prepared_once_per_buffer_set_and_block(tmp_path: Path) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    sweep = fake_sweep().replace(axes={"seqlen": (8,)}, replicates=2)
    run = bench(tmp_path, reg, profiler=lambda fn, dev: ["x"]).sweep(sweep)
    # Fresh inputs and fresh calls in every replicate block.
    assert len(reg.arms["fake_a"].prepared) == 2 * QUICK.buffer_sets * 2  # type: ignore[attr-defined]
    assert len(reg.arms["fake_b"].prepared) == QUICK.buffer_sets * 2  # type: ignore[attr-defined]
    assert run.cells[0].extra["buffer_sets"] == QUICK.buffer_sets


@pytest.mark.usefixtures("private_guard")
def test_demo_command_end_to_end_is_guarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.cli import main

    monkeypatch.setattr(Target, "detect", staticmethod(lambda index=None: CPU))
    demo = real().get_sweep("cpu-demo")
    monkeypatch.setitem(real().sweeps, "cpu-demo", quick(demo))
    try:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--root", str(ROOT), "demo", "--scratch", str(tmp_path / "s")], out, err)
    finally:
        real().sweeps["cpu-demo"] = demo
    assert code == 0, err.getvalue()
    (run,) = load_store(tmp_path / "s" / "results")
    assert run.name == "cpu-demo" and run.status == "ok"
    assert run.guard.mode == "held" and run.evidence_grade
    assert run.guard.holder and run.guard.before
    assert (tmp_path / "s" / "docs" / "README.md").is_file()
    assert "scratch" not in json.dumps(run.config)
    text = out.getvalue()
    assert str(tmp_path / "s" / "docs") in text and "A/A floor" in text and "replicate band" in text


@pytest.mark.usefixtures("private_guard")
def test_sweep_command_is_guarded_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.cli import main

    monkeypatch.setattr(Target, "detect", staticmethod(lambda index=None: CPU))
    args = ["sweep", "cpu-demo", "--no-progress", "--min-reps", "3", "--max-reps", "3",
            "--min-sample-s", "0.0002", "--warmup", "1", "--axis", "hq=2", "--axis", "seqlen=64",
            "--replicates", "2", "--store", str(tmp_path / "store"), "--root", str(ROOT)]  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    assert main(args, out, err) == 0, err.getvalue()
    assert main([*args, "--unguarded"], out, err) == 0, err.getvalue()
    runs = sorted(load_store(tmp_path / "store"), key=lambda r: r.guard.mode)
    assert [r.guard.mode for r in runs] == ["held", "unguarded"]
    held = runs[0]
    assert held.config["grid"]["axes"] == {"hq": [2], "seqlen": [64]}  # the axis overrides
    assert held.config["timing"]["min_reps"] == 3 and held.cells[0].blocks == (3, 3)
    assert "unguarded" in err.getvalue()


def test_probe_and_gpu_sweeps_refuse_fast_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.cli import main

    monkeypatch.setattr(Target, "detect", staticmethod(lambda index=None: CPU))
    for argv in (["probe"], ["sweep", "prefill-vs-sdpa"]):
        out, err = io.StringIO(), io.StringIO()
        code = main(["--root", str(ROOT), "--store", str(tmp_path), *argv], out, err)
        assert code == 77 and "needs a GPU" in err.getvalue(), err.getvalue()
    assert list(tmp_path.iterdir()) == []


def test_inputs_of_every_role_are_laid_out_alike_in_one_slab(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether_kernels import Shape
    from tether_kernels_plugin import cases as attention

    # Fixture alignment: coarser than the CPU allocator's own, so the slab must move itself.
    monkeypatch.setitem(attention.SLAB_ALIGN, "cpu", 4096)
    shape = Shape(1, 24, 24, 4, 2, 16, "f32", True)
    layouts = []
    for seed in (1, 2):
        q, k, v, out = attention.make_inputs(shape, "cpu", seed)
        assert q.shape == out.shape == (1, 24, 4, 16) and k.shape == v.shape == (1, 24, 2, 16)
        assert all(t.is_contiguous() for t in (q, k, v, out))
        base = q.data_ptr()
        offsets = [t.data_ptr() - base for t in (q, k, v, out)]
        ends = [
            o + t.numel() * t.element_size() for o, t in zip(offsets, (q, k, v, out), strict=True)
        ]
        assert all(e <= o for e, o in zip(ends[:-1], offsets[1:], strict=True))  # no overlap
        assert all(t.data_ptr() % 4096 == 0 for t in (q, k, v, out))
        assert bool((out == 0).all()) and float(q.std()) > 0.5
        layouts.append(offsets)
    assert layouts[0] == layouts[1]


def test_the_release_demo_and_its_control_time_the_same_cells() -> None:
    reg = real()
    demo, control = reg.get_sweep("aa-release-demo"), reg.get_sweep("aa-control-demo")
    assert (demo.axes, demo.fixed, demo.arms) == (control.axes, control.fixed, control.arms)
    assert demo.timing.release_between_arms and not control.timing.release_between_arms
    # The demo must be timed where allocation is visible (events), the control by replay.
    assert demo.timing.resolved_sampler("cuda") == "events"
    assert control.timing == TimingPolicy()


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(256, id="a-bare-int"),
        pytest.param("f16", id="a-string"),
        pytest.param((), id="empty"),
    ],
)
def test_an_axis_that_is_not_a_sequence_of_values_is_refused_by_name(values: object) -> None:
    from tether.errors import UsageError

    with pytest.raises(UsageError, match=r"sweep 'fake': axis 'head_dim' must be a non-empty"):
        fake_sweep().replace(axes={"seqlen": (8, 16), "head_dim": values})
    assert fake_sweep().replace(axes={"seqlen": [8, 16]}).keys() == [{"seqlen": 8}, {"seqlen": 16}]
