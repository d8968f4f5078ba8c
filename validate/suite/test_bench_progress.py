"""The sweep progress bar: it reports cells and the running A/A floor on the stream it is given."""

from __future__ import annotations

import io

from tether.bench.progress import SweepProgress


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
