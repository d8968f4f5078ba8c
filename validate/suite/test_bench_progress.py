"""The sweep progress bar: it reports cells and the running A/A floor (the docs' A/A floor) on the
stream it is given."""

from __future__ import annotations

import io

from tether.bench.progress import SweepProgress
from tether.stats import aggregate, cell_stats

from validate.suite.runfactory import make_sweep_run


def test_progress_writes_cells_and_floor_to_its_stream() -> None:
    stream = io.StringIO()
    with SweepProgress(2, "fixture-sweep", stream) as bar:
        bar.advance({"A": [1.0], "A2": [1.05], "B": [0.5]})
        bar.advance({"A": [1.0], "A2": [0.95], "B": [0.5]})
    text = stream.getvalue()
    assert "fixture-sweep" in text and "2/2" in text
    assert "A/A floor" in text and "median floor" not in text


def test_progress_without_a_stream_is_silent_but_counts() -> None:
    bar = SweepProgress(1, "quiet", None)
    with bar:
        bar.advance({"A": [1.0], "A2": [1.0]})


def test_progress_bar_floor_is_the_docs_floor() -> None:
    run = make_sweep_run(axes={"seqlen": [256, 512, 1024]}, ratio=0.9, noise=0.05)
    stream = io.StringIO()
    with SweepProgress(len(run.cells), "fixture", stream) as bar:
        for cell in run.cells:
            bar.advance({role: list(v) for role, v in cell.samples.items()})
    agg = aggregate(cell_stats(run))
    assert agg.floor is not None
    text = stream.getvalue()
    assert f"A/A floor {agg.floor[0]:.3f}-{agg.floor[1]:.3f}" in text
    assert "median floor" not in text
