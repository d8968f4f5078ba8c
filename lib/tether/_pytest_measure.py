"""The ``tether_measure`` fixture and the options that go with it, as pytest-benchmark users
expect them: a result table at the end of the session, ``--tether-save`` (one run in the
project's store), ``--tether-compare`` (against a saved run) and ``--tether-compare-fail``
(a threshold on B's change that fails the session).

Registered through ``tether.pytest_plugin``; nothing here runs unless a test asks for the
fixture or one of the options is given.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from tether import project
from tether.bench.engine import TimingPolicy
from tether.bench.engine import measure as engine_measure
from tether.bench.sweep import Target
from tether.gpus import device as default_device
from tether.render.env import floor_range, ms, ratio
from tether.stats import cell_stat
from tether.store.io import load_store
from tether.store.model import Cell, GuardRecord, Run

_RESULTS = pytest.StashKey[list[dict[str, Any]]]()
_WORKER_RESULTS = "tether_measured"
SAVE_PREFIX = "pytest-"
# A saved run is a record of what a test suite measured, outside the host lock: it is marked
# unguarded, so it can never be cited as evidence.
SAVE_REASON = "written by pytest --tether-save, outside the host lock"


@dataclass(frozen=True)
class Measured:
    """One ``tether_measure`` call: the judged cell (``stat``, a ``tether.stats.CellStat``,
    whose attributes it also answers) and the raw cell it came from."""

    label: str
    stat: Any
    cell: Any

    def __getattr__(self, name: str) -> Any:
        if name in ("stat", "cell", "label"):
            raise AttributeError(name)
        return getattr(self.stat, name)

    def __str__(self) -> str:

        s = self.stat
        flags = f"; flags {', '.join(s.flags)}" if s.flags else ""
        return (
            f"{self.label}: B against A {ratio(s.ratio)}, {s.verdict} (A/A floor "
            f"{floor_range(s.floor)}, band {floor_range(s.band)}); median A {ms(s.a_median)} ms, "
            f"B {ms(s.b_median)} ms{flags}"
        )

    __repr__ = __str__


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tether", "tether (measurement and hardware marks)")
    group.addoption(
        "--tether-save",
        action="store_true",
        default=False,
        help=f"write what tether_measure measured as one run ({SAVE_PREFIX}NAME) into the "
        "project's results store",
    )
    group.addoption(
        "--tether-save-as",
        metavar="NAME",
        default="measure",
        help=f"the saved run's name after {SAVE_PREFIX} (default: measure)",
    )
    group.addoption(
        "--tether-compare",
        metavar="RUN",
        default=None,
        help="compare each measured B against a saved run: a run id, or 'latest' (the newest "
        f"{SAVE_PREFIX}* run in the store)",
    )
    group.addoption(
        "--tether-compare-fail",
        metavar="PCT",
        default=None,
        help="with --tether-compare: fail the session when a test's B median is slower than "
        "the saved one by more than PCT (5%%, or median:5%% as pytest-benchmark writes it)",
    )
    group.addoption(
        "--tether-pin-gpus",
        action="store_true",
        default=None,
        help="under xdist, pin each worker to one GPU (ini: tether_pin_gpus = true)",
    )
    parser.addini("tether_pin_gpus", "pin each xdist worker to one GPU", type="bool", default=False)
    parser.addini(
        "tether_short_markers",
        "act on the unprefixed marks (gpu, triton, arch, devtool, cpu_toy); default: only in "
        "a project whose pyproject.toml has a [tool.tether] table",
        default="auto",
    )


def compare_threshold(text: str) -> float:
    """``5%``, ``5``, ``median:5%`` or ``mean:5%`` as the fraction 0.05."""
    m = re.fullmatch(r"(?:(?:median|mean|min):)?(\d+(?:\.\d+)?)%?", text.strip())
    if not m:
        raise pytest.UsageError(
            f"--tether-compare-fail {text!r}: expected a percentage such as 5% or median:5%"
        )
    return float(m.group(1)) / 100.0


def configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []
    name = config.getoption("--tether-save-as")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise pytest.UsageError(f"--tether-save-as {name!r}: letters, digits, '.', '_', '-'")
    fail = config.getoption("--tether-compare-fail")
    if fail is not None:
        if config.getoption("--tether-compare") is None:
            raise pytest.UsageError("--tether-compare-fail needs --tether-compare RUN")
        compare_threshold(fail)


def _record(config: pytest.Config, measured: Measured) -> None:
    config.stash[_RESULTS].append(
        {"label": measured.label, "cell": measured.cell.to_json(), "unit": "call"}
    )


@pytest.fixture
def tether_measure(request: pytest.FixtureRequest) -> Any:
    """Measure one sweep cell inside a test, with tether's engine and statistics.

        def test_fused_beats_ops(tether_measure):
            stat = tether_measure({"A": ops_call, "A2": ops_call_2, "B": fused_call})
            assert stat.verdict != "loss", stat

    Roles: ``A`` (the baseline), ``B`` (the arm under test) and ``A2``, a second, separately
    prepared instance of A (the A/A control; when left out, A is timed twice, which measures
    timer noise only). Returns the cell judged against its A/A floor and replicate band
    (``blocks`` replicate blocks of the engine's samples): it has every attribute of a
    ``tether.stats.CellStat`` and prints as one readable line. ``device`` "cpu" times host
    functions by the wall clock (default: this host's device, where the calls launch GPU work
    and are timed by CUDA graphs). ``name`` labels the row of the session's table (default:
    the test's id). Every call is listed at the end of the session, saved with
    ``--tether-save`` and compared with ``--tether-compare``.
    """
    config = request.config
    calls_made = [0]

    def measure(
        calls: Mapping[str, Callable[[], object]],
        *,
        policy: Any = None,
        blocks: int = 2,
        work: float = 1.0,
        device: str | None = None,
        name: str | None = None,
    ) -> Measured:

        if not {"A", "B"} <= set(calls):
            raise pytest.UsageError("tether_measure: calls need roles A and B (and ideally A2)")
        roles = {"A": calls["A"], "A2": calls.get("A2", calls["A"]), "B": calls["B"]}
        timing = policy or TimingPolicy()
        dev = device or default_device()
        samples: dict[str, list[float]] = {r: [] for r in roles}
        sizes = []
        flags: set[str] = set()
        for block in range(max(1, blocks)):
            got = engine_measure(roles, timing, device=dev, seed=timing.seed + block)
            for role, vals in got.samples.items():
                samples[role].extend(vals)
            flags.update(got.flags)
            sizes.append(len(got.samples["A"]))
        calls_made[0] += 1
        label = name or request.node.nodeid + (f" #{calls_made[0]}" if calls_made[0] > 1 else "")
        cell = Cell(
            key={"test": label},
            work=work,
            samples={r: tuple(v) for r, v in samples.items()},
            blocks=tuple(sizes) if len(sizes) > 1 else (),
            flags=tuple(sorted(flags)),
            extra={"device": dev},
        )
        measured = Measured(label, cell_stat(cell, {}), cell)
        _record(config, measured)
        return measured

    return measure


def worker_output(config: pytest.Config) -> list[dict[str, Any]]:
    stored: list[dict[str, Any]] = config.stash.get(_RESULTS, [])
    return list(stored)


def merge_worker(config: pytest.Config, node: Any) -> None:
    """xdist controller: add a finished worker's measurements."""
    config.stash[_RESULTS].extend(getattr(node, "workeroutput", {}).get(_WORKER_RESULTS, []))


def _project_root(config: pytest.Config) -> Path:

    return project.find_root(Path(str(config.rootpath)))


def _saved_run(config: pytest.Config, which: str) -> Any:

    store = project.get(_project_root(config)).store
    runs = [r for r in load_store(store) if r.kind == "sweep" and r.name.startswith(SAVE_PREFIX)]
    if which == "latest":
        if not runs:
            raise pytest.UsageError(f"--tether-compare latest: {store} holds no {SAVE_PREFIX}* run")
        return max(runs, key=lambda r: (r.started, r.id))
    for run in runs:
        if run.id == which:
            return run
    raise pytest.UsageError(f"--tether-compare {which}: no {SAVE_PREFIX}* run with that id")


def _changes(config: pytest.Config, rows: list[Any]) -> tuple[Any, dict[str, float]]:
    """The saved run compared against, and each label's B median now over then, minus one."""
    which = config.getoption("--tether-compare")
    if which is None:
        return None, {}

    saved = _saved_run(config, which)
    then = {str(c.key.get("test")): median(c.samples["B"]) for c in saved.cells}
    return saved, {r.label: r.stat.b_median / then[r.label] - 1.0 for r in rows if r.label in then}


def _save(config: pytest.Config, rows: list[Any]) -> Any:

    name = SAVE_PREFIX + config.getoption("--tether-save-as")
    on_gpu = any(r.cell.extra.get("device") != "cpu" for r in rows)
    if on_gpu:
        target = Target.detect()
    else:
        target = Target("cpu", "cpu", f"cpu: {platform.processor() or platform.machine()}")
    labels = sorted({r.label for r in rows})
    config_doc = {
        "grid": {"axes": {"test": labels}, "fixed": {}},
        "arms": {"A": "A", "B": "B"},
        "unit": "call",
        "source": "pytest tether_measure",
    }
    run = Run.new(
        "sweep", name, arch=target.arch, device=target.device_name, config=config_doc,
        cells=[r.cell for r in sorted(rows, key=lambda r: r.label)],
        guard=GuardRecord(mode="unguarded", reason=SAVE_REASON), root=_project_root(config),
        runtime=target.runtime, driver=target.driver,
    )  # fmt: skip

    return run.write(project.get(_project_root(config)).store)


def summary(terminalreporter: Any, config: pytest.Config) -> int | None:
    """Print the table; save and compare where asked. Returns 1 when a comparison failed."""

    raw = config.stash.get(_RESULTS, [])
    if not raw:
        if config.getoption("--tether-save") or config.getoption("--tether-compare"):
            terminalreporter.write_line("tether: no tether_measure calls ran; nothing to save")
        return None
    rows = []
    for item in raw:
        cell = _cell(item["cell"])
        rows.append(Measured(item["label"], cell_stat(cell, {}), cell))
    rows.sort(key=lambda r: r.label)
    saved, changes = _changes(config, rows)
    limit = config.getoption("--tether-compare-fail")
    threshold = compare_threshold(limit) if limit else None
    tr = terminalreporter
    tr.ensure_newline()
    tr.write_sep("-", "tether_measure: median seconds per call, B against A")
    head = ["test", "A ms", "B ms", "ratio", "A/A floor", "band", "verdict", "flags"]
    if saved is not None:
        head.append(f"B vs {saved.id}")
    table = [head]
    failed = []
    for r in rows:
        s = r.stat
        line = [
            r.label, ms(s.a_median), ms(s.b_median), ratio(s.ratio), floor_range(s.floor),
            floor_range(s.band), s.verdict, ", ".join(s.flags) or "-",
        ]  # fmt: skip
        if saved is not None:
            change = changes.get(r.label)
            line.append("not in run" if change is None else f"{change * 100:+.1f}%")
            if change is not None and threshold is not None and change > threshold:
                failed.append(r.label)
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        tr.write_line("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if config.getoption("--tether-save"):
        path = _save(config, rows)
        tr.write_line(f"tether: saved {path}")
    if failed:
        tr.write_line(
            f"tether: {len(failed)} test(s) slower than {saved.id} by more than {limit}: "
            + ", ".join(failed),
            red=True,
        )
        return 1
    return None


def _cell(data: Mapping[str, Any]) -> Any:

    return Cell(
        key=dict(data["key"]),
        work=float(data["work"]),
        samples={k: tuple(v) for k, v in data["samples"].items()},
        blocks=tuple(data.get("blocks", ())),
        flags=tuple(data.get("flags", ())),
        extra=dict(data.get("extra", {})),
    )
