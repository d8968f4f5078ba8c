"""`tether demo` tells its story: where its run goes, what it measured in the docs' terms, and
no silent pile of old scratch runs (its progress bar and quiet profiler are tested with the
bench, in test_bench_progress and test_bench_fidelity).

Stores are FIXTURES in tmp_path; the one real measurement is the CPU demo at toy timing.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tether.bench.demo import prune_scratch, summary_lines
from tether.cli import main
from tether.stats import aggregate, cell_stats
from tether.store import load_store

from validate.suite.runfactory import make_sweep_run

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("private_guard")


# -- where the run goes ------------------------------------------------------------------------


class _Measured(Exception):
    """Raised by the FIXTURE stand-in for run_sweep once it has seen where the run would go."""

    def __init__(self, store: Path) -> None:
        self.store = Path(store)


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        pytest.param([], "scratch/results", id="default-scratch"),
        pytest.param(["--publish"], "results", id="publish"),
        pytest.param(["--store", "{tmp}/mine"], "{tmp}/mine", id="explicit-store"),
    ],
)
def test_demo_on_a_gpu_host_writes_to_scratch_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], where: str
) -> None:
    from tether.bench import sweep as sweep_mod
    from tether.bench.sweep import Target
    from tether.guard import idle

    gpu = Target("sm90", "cuda", "FIXTURE-GPU")  # what detect() says on an H100/H200 host
    monkeypatch.setattr(Target, "detect", staticmethod(lambda index=None: gpu))
    # The guard checks the load only: on a real GPU host this runs inside verify's hold,
    # whose other workers a second guard on a private lock rightly sees as busy GPUs.
    monkeypatch.setattr(idle, "resolve_target", lambda target: "cpu")

    def stand_in(self: sweep_mod.Bench, sweep: object, **_: object) -> None:
        raise _Measured(self.store)  # no GPU here: stop where the measurement would start

    monkeypatch.setattr(sweep_mod.Bench, "sweep", stand_in)
    # --debug: the stand-in's exception must escape main (without it, main reports it in one
    # line as an internal error, exit 70).
    argv = ["--root", str(ROOT), "--debug", "demo", *(a.format(tmp=tmp_path) for a in extra)]
    (tmp_path / "mine").mkdir()
    with pytest.raises(_Measured) as seen:
        main(argv, out=io.StringIO(), err=io.StringIO())
    want = Path(where.format(tmp=tmp_path))
    assert seen.value.store == (want if want.is_absolute() else ROOT / want)


def test_publish_and_store_together_is_a_usage_error() -> None:
    err = io.StringIO()
    rc = main(["--root", str(ROOT), "demo", "--publish", "--store", "/tmp"], io.StringIO(), err)
    assert rc == 2 and "--publish" in err.getvalue()


# -- what it says ------------------------------------------------------------------------------


def test_summary_names_arms_cells_verdicts_and_the_docs_floor() -> None:
    run = make_sweep_run(axes={"hq": [16, 32], "seqlen": [256, 512]}, ratio=0.8)
    text = "\n".join(summary_lines(run))
    agg = aggregate(cell_stats(run))
    assert agg.floor is not None and agg.geomean is not None
    assert "A = sdpa_flash" in text and "B = triton" in text and "A/A control" in text
    assert f"{agg.count} cells: {agg.wins} faster, {agg.losses} slower, {agg.levels} level" in text
    assert f"geomean ratio median(A)/median(B) {agg.geomean:.3f}" in text
    assert f"A/A floor {agg.floor[0]:.3f}-{agg.floor[1]:.3f}" in text
    for st in cell_stats(run):
        assert f"{st.label}" in text and f"ratio {st.ratio:.3f}" in text


# -- old scratch runs ---------------------------------------------------------------------------


def test_prune_keeps_the_newest_runs_of_each_sweep(tmp_path: Path) -> None:
    store = tmp_path / "scratch" / "results"
    demo = [
        make_sweep_run(name="cpu-demo", arch="cpu", started=f"2026-01-0{d}T00:00:00Z", store=store)
        for d in range(1, 8)
    ]
    other = make_sweep_run(name="other", arch="cpu", store=store)
    (store / "cpu" / "broken.json").write_text("{", encoding="utf-8")
    pruned = prune_scratch(store, keep=3)
    assert sorted(p.name for p in pruned.removed) == sorted(r.path.name for r in demo[:4])  # type: ignore[union-attr]
    assert pruned.kept == 4 and pruned.unreadable == 1
    left = {p.stem for p in (store / "cpu").glob("*.json")}
    assert {r.id for r in demo[4:]} | {other.id, "broken"} == left
    assert prune_scratch(store, keep=0).removed == ()


def test_cpu_demo_end_to_end_tells_its_story(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from tether import registry
    from tether.bench.engine import TimingPolicy
    from tether.bench.sweep import Target

    # FIXTURE timing: the fewest samples that still exercise interleaving and the A/A control
    toy = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
    monkeypatch.setattr(
        Target, "detect", staticmethod(lambda index=None: Target("cpu", "cpu", "cpu: test"))
    )
    reg = registry.load(["tether_kernels_plugin"])
    monkeypatch.setitem(reg.sweeps, "cpu-demo", reg.get_sweep("cpu-demo").replace(timing=toy))
    scratch = tmp_path / "s"
    old = [
        make_sweep_run(
            name="cpu-demo",
            arch="cpu",
            started=f"2026-01-0{d}T00:00:00Z",
            store=scratch / "results",
        )
        for d in (1, 2)
    ]
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--root", str(ROOT), "demo", "--scratch", str(scratch), "--keep", "2"], out, err)
    assert rc == 0, err.getvalue()
    text = out.getvalue()
    for needle in ("arms: A = ", "A/A control", " cells: ", "A/A floor", "look at:", "store show"):
        assert needle in text, f"{needle!r} missing from:\n{text}"
    assert "removed the 1 oldest" in text
    runs = load_store(scratch / "results")
    assert len(runs) == 2 and old[0].id not in {r.id for r in runs}
    assert "USDT" not in capfd.readouterr().err


def test_the_cpu_demo_run_twice_compares_without_differences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two runs of one commit on one machine: "agree" or "too noisy to judge", never "DIFFERS";
    # and the second run's verdicts rest on two runs, so they are no longer provisional.
    from tether import registry
    from tether.bench.engine import TimingPolicy
    from tether.bench.sweep import Target
    from tether.cli.compare import compare_runs

    toy = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
    monkeypatch.setattr(
        Target, "detect", staticmethod(lambda index=None: Target("cpu", "cpu", "cpu: test"))
    )
    reg = registry.load(["tether_kernels_plugin"])
    monkeypatch.setitem(reg.sweeps, "cpu-demo", reg.get_sweep("cpu-demo").replace(timing=toy))
    scratch = tmp_path / "s"
    texts = []
    for _ in range(2):
        out, err = io.StringIO(), io.StringIO()
        rc = main(["--root", str(ROOT), "demo", "--scratch", str(scratch)], out, err)
        assert rc == 0, err.getvalue()
        texts.append(out.getvalue())
    runs = sorted(load_store(scratch / "results"), key=lambda r: r.started)
    assert len(runs) == 2
    doc = compare_runs(runs[0], runs[1], runs=runs)
    assert doc["differs"] == 0 and doc["failing"] == 0, doc
    assert "provisional: the band rests on 1 run" in texts[0]
    assert runs[0].evidence_grade and runs[1].evidence_grade  # the demo holds the guard
    assert "provisional: the band rests on" not in texts[1]


def test_ctrl_c_in_the_demos_closing_idle_check_keeps_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo measured on a bare Bench: a Ctrl-C while the guard took its closing idle
    # snapshot threw the complete run away (no run written, exit 130).
    import os
    import signal

    from tether import registry
    from tether.bench.engine import TimingPolicy
    from tether.bench.sweep import Target
    from tether.guard.api import Holding

    toy = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
    monkeypatch.setattr(
        Target, "detect", staticmethod(lambda index=None: Target("cpu", "cpu", "cpu: test"))
    )
    reg = registry.load(["tether_kernels_plugin"])
    sweep = reg.get_sweep("cpu-demo")
    monkeypatch.setitem(reg.sweeps, "cpu-demo", sweep.replace(timing=toy))
    real = Holding.recheck

    def ctrl_c_then_look(self: Holding, full: bool = True) -> object:
        os.kill(os.getpid(), signal.SIGINT)
        return real(self, full)

    monkeypatch.setattr(Holding, "recheck", ctrl_c_then_look)
    scratch = tmp_path / "s"
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--root", str(ROOT), "demo", "--scratch", str(scratch)], out, err)
    assert rc == 128 + signal.SIGINT, err.getvalue()
    (run,) = load_store(scratch / "results")
    assert run.status == "ok" and len(run.cells) == len(sweep.keys())
    assert run.guard.after is not None
    assert run.guard.after["interrupted"] == {"signal": "SIGINT", "arrived": "during"}
