"""Sweeps end to end on the CPU: a valid run in a tmp store, fidelity flags, Ctrl-C, refusals."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef, Target, list_sweeps, load_sweep, run_sweep
from tether.errors import ArmUnavailableError
from tether.store import load_run, load_store

ROOT = Path(__file__).resolve().parents[2]
CPU = Target("cpu", "cpu", "cpu: test fixture")
# Fixture policy: the fewest samples that still exercise interleaving and the A/A control.
QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)


def quick(sweep: SweepDef) -> SweepDef:
    return sweep.replace(timing=QUICK)


def test_every_sweep_definition_loads_and_names_itself() -> None:
    names = list_sweeps(ROOT)
    for required in ("prefill-triton-vs-sdpa", "chunked-prefill", "cpu-demo", "aa-release-demo"):
        assert required in names
    for name in names:
        sweep = load_sweep(name, ROOT)
        assert sweep.name == name
        assert {"A", "B"} <= set(sweep.arms)
    assert len(load_sweep("prefill-triton-vs-sdpa", ROOT).keys()) == 60


def test_cpu_demo_sweep_end_to_end_loads_and_validates(tmp_path: Path) -> None:
    sweep = quick(load_sweep("cpu-demo", ROOT))
    run = run_sweep(sweep, store=tmp_path, root=ROOT, target=CPU)
    files = list((tmp_path / "cpu").glob("*.json"))
    assert len(files) == 1
    loaded = load_run(files[0])
    assert loaded.status == "ok" and loaded.id == run.id
    assert len(loaded.cells) == len(sweep.keys()) == 6
    assert loaded.config["arms"] == {"A": "sdpa_math", "B": "sdpa_flash"}
    assert loaded.config["timing"] == QUICK.to_json()
    for cell in loaded.cells:
        assert set(cell.samples) == {"A", "A2", "B"}
        assert cell.flops > 0
        assert "single_prefill" in cell.reach["entry_points"]
        assert any("flash_attention" in k for k in cell.kernels["B"])
        assert len(cell.extra["order"]) == 3


def test_a_stray_kernel_flags_the_cell(tmp_path: Path) -> None:
    # Fixture: a fake profile in which every arm also launched a mask-building kernel.
    def profiler(fn: object, device: str) -> list[str]:
        return ["aten::_scaled_dot_product_attention_math", "aten::triu"]

    sweep = quick(load_sweep("cpu-demo", ROOT)).replace(axes={"hq": (2,), "seqlen": (64,)})
    run = run_sweep(sweep, store=tmp_path, root=ROOT, target=CPU, profiler=profiler)
    (cell,) = run.cells
    assert "kernel_mismatch" in cell.flags
    assert cell.extra["unexpected_kernels"]["A"] == ["aten::triu"]
    # B (flash) did not run its own kernel at all in this fake profile: both names are strays.
    assert "aten::_scaled_dot_product_attention_math" in cell.extra["unexpected_kernels"]["B"]


@dataclass
class FakeArm:
    """Fixture arm: a no-op call; raises KeyboardInterrupt once ``interrupt_at`` cells passed."""

    name: str
    interrupt_at: int | None = None
    unavailable: str | None = None
    prepared: list[int] = field(default_factory=list)
    expected_kernels: tuple[str, ...] = (r".",)

    def supports(self, shape: object, arch: str) -> str | None:
        return self.unavailable

    def prepare(self, q, k, v, shape, out=None, arch=None):
        self.prepared.append(1)
        per_cell = (2 if self.name == "fake_a" else 1) * QUICK.buffer_sets  # A and A2 share it
        cell = (len(self.prepared) - 1) // per_cell
        stop = self.interrupt_at is not None and cell >= self.interrupt_at

        def call() -> None:
            if stop:
                raise KeyboardInterrupt

        return call


def fake_sweep() -> SweepDef:
    return SweepDef(
        name="fake",
        axes={"seqlen": (8, 16, 32)},
        fixed={"batch": 1, "hq": 2, "hkv": 2, "head_dim": 16, "dtype": "f32", "causal": True},
        arms={"A": "fake_a", "B": "fake_b"},
        timing=QUICK,
        needs_gpu=False,
    )


def test_ctrl_c_writes_a_rejected_partial_run_and_propagates(tmp_path: Path) -> None:
    arms = {"fake_a": FakeArm("fake_a"), "fake_b": FakeArm("fake_b", interrupt_at=2)}
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            fake_sweep(), store=tmp_path, root=ROOT, target=CPU, get_arm=arms.__getitem__,
            profiler=lambda fn, dev: ["x"],
        )  # fmt: skip
    (run,) = load_store(tmp_path)
    assert run.status == "rejected"
    assert run.reason == "interrupted after 2 of 3 cells"
    assert run.config["grid"]["axes"] == {}
    assert [c.key for c in run.cells] == [{"seqlen": 8}, {"seqlen": 16}]


def test_an_arm_that_cannot_serve_a_cell_rejects_the_run(tmp_path: Path) -> None:
    arms = {"fake_a": FakeArm("fake_a", unavailable="no GQA here"), "fake_b": FakeArm("fake_b")}
    run = run_sweep(fake_sweep(), store=tmp_path, root=ROOT, target=CPU, get_arm=arms.__getitem__)
    assert run.status == "rejected"
    assert "no GQA here" in run.reason
    assert load_store(tmp_path)[0].id == run.id
    assert issubclass(ArmUnavailableError, Exception)


def test_demo_command_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.bench.sweep import Target as T
    from tether.cli import main

    pytest.importorskip("tether.guard.api", reason="the guard has not landed in this checkout")
    # Fixture environment: a private lock, and a load limit a busy CI box cannot trip.
    monkeypatch.setenv("TETHER_GUARD_LOCK", str(tmp_path / "guard.lock"))
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "1000")
    monkeypatch.setattr(T, "detect", staticmethod(lambda: CPU))
    monkeypatch.setattr(
        "tether.bench.sweep.load_sweep",
        lambda name, root: quick(load_sweep(name, root)),
    )
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(ROOT), "demo", "--scratch", str(tmp_path / "s")], out, err)
    assert code == 0, err.getvalue()
    (run,) = load_store(tmp_path / "s" / "results")
    assert run.name == "cpu-demo" and run.status == "ok"
    assert run.guard, "the demo runs under the guard and records its evidence"
    assert (tmp_path / "s" / "docs" / "README.md").is_file()
    assert "scratch" not in json.dumps(run.config)
    assert str(tmp_path / "s" / "docs") in out.getvalue()


def test_inputs_of_every_role_are_laid_out_alike_in_one_slab(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.bench import sweep as sweep_module
    from tether.bench.sweep import make_inputs, shape_of

    # Fixture alignment: coarser than the CPU allocator's own, so the slab must move itself.
    monkeypatch.setitem(sweep_module.SLAB_ALIGN, "cpu", 4096)

    shape = shape_of({"seqlen": 24}, {"batch": 1, "hq": 4, "hkv": 2, "head_dim": 16,
                                      "dtype": "f32", "causal": True})  # fmt: skip
    layouts = []
    for seed in (1, 2):
        q, k, v, out = make_inputs(shape, "cpu", seed)
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


def test_each_role_is_prepared_once_per_buffer_set(tmp_path: Path) -> None:
    arms = {"fake_a": FakeArm("fake_a"), "fake_b": FakeArm("fake_b")}
    sweep = fake_sweep().replace(axes={"seqlen": (8,)})
    run = run_sweep(sweep, store=tmp_path, root=ROOT, target=CPU, get_arm=arms.__getitem__,
                    profiler=lambda fn, dev: ["x"])  # fmt: skip
    assert len(arms["fake_a"].prepared) == 2 * QUICK.buffer_sets == 4
    assert len(arms["fake_b"].prepared) == QUICK.buffer_sets
    assert run.cells[0].extra["buffer_sets"] == QUICK.buffer_sets


def test_the_release_demo_and_its_control_time_the_same_cells() -> None:
    demo, control = load_sweep("aa-release-demo", ROOT), load_sweep("aa-control-demo", ROOT)
    assert (demo.axes, demo.fixed, demo.arms) == (control.axes, control.fixed, control.arms)
    assert demo.timing.release_between_arms and not control.timing.release_between_arms
    # The demo must be timed where allocation is visible (events), the control by replay.
    assert demo.timing.resolved_sampler("cuda") == "events"
    assert control.timing == TimingPolicy()
