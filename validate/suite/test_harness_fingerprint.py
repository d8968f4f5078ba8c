"""The harness fingerprint per run (tether.store.harness), on a FIXTURE project with two sweeps.

The FIXTURE plugin folder ``plug/`` holds two case models, each with its own input maker, two
arm adapters and a sweeps module. The ``attn`` sweep times the ``call`` arm (adapter
``CallArm``) over the ``fx-attn`` case model; the ``norm`` sweep times ``graph``
(``GraphArm``) over ``fx-norm``. Moving code or declaring sweeps must supersede nothing;
changing what one sweep's samples mean must supersede that sweep only; runs recorded in the
whole-file format keep the whole-file rule.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tether.registry import Registry
from tether.store import CurrentHarness, harness_fingerprint, write_run
from tether.store.harness import parse, recorded_value, run_covers
from tether.store.provenance import bench_dir

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run, resealed

CASES = '''"""FIXTURE case models."""

from dataclasses import dataclass

SLAB = 64  # how many values one row of inputs holds


def attn_inputs(n, seed):
    """The attn case's inputs."""
    return [seed + i for i in range(n * SLAB)]


def norm_inputs(n, seed):
    return [seed - i for i in range(n)]


@dataclass(frozen=True)
class AttnCase:
    n: int
    work = 1.0

    def inputs(self, device, seed):
        return attn_inputs(self.n, seed)


@dataclass(frozen=True)
class NormCase:
    n: int
    work = 2.0

    def inputs(self, device, seed):
        return norm_inputs(self.n, seed)


def attn_case(fields):
    return AttnCase(fields["n"])


def norm_case(fields):
    return NormCase(fields["n"])
'''

ADAPTERS = '''"""FIXTURE arm adapters."""


class CallArm:
    allowed_kernels = ()

    def __init__(self, name):
        self.name = name

    def prepare(self, case, inputs, arch):
        return lambda: sum(inputs)


class GraphArm:
    allowed_kernels = ()

    def __init__(self, name):
        self.name = name

    def prepare(self, case, inputs, arch):
        return lambda: max(inputs)
'''

# Sweep declarations are data over the case models: none of it is a cover. ``n`` is also the
# name of the input makers' parameter, which must not make the grid part of their code.
SWEEPS = '''"""FIXTURE sweeps."""

n = (1, 2, 4)
SWEEPS = {
    "attn": {"case": "fx-attn", "axes": {"n": n}, "arms": {"A": "call", "B": "call"}},
    "norm": {"case": "fx-norm", "axes": {"n": n}, "arms": {"A": "graph", "B": "graph"}},
}
'''

ATTN = {"case": "fx-attn", "arms": {"A": "call", "B": "call"}}
NORM = {"case": "fx-norm", "arms": {"A": "graph", "B": "graph"}}


def _project(root: Path) -> Path:
    plug = root / "plug"
    plug.mkdir(parents=True)
    for name, text in (("cases", CASES), ("adapters", ADAPTERS), ("sweeps", SWEEPS)):
        (plug / f"{name}.py").write_text(text, encoding="utf-8")
    # The declared harness is the case models and adapters, as tether's own pyproject says.
    return fixture_project(root, harness=("plug/cases.py", "plug/adapters.py"))


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}_{id(path)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _registry(root: Path) -> Registry:
    """What the measuring process registered: the FIXTURE's case models and arms, live."""
    cases, adapters = _load(root / "plug" / "cases.py"), _load(root / "plug" / "adapters.py")
    return Registry(
        cases={"fx-attn": cases.attn_case, "fx-norm": cases.norm_case},
        arms={"call": adapters.CallArm("call"), "graph": adapters.GraphArm("graph")},
    )


def _recorded(root: Path, config: dict[str, Any], kind: str = "sweep", name: str = "s") -> str:
    value = recorded_value(kind, name, config, root, bench_dir(root), _registry(root))
    assert value is not None
    return value


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def _current(root: Path, value: str) -> bool:
    return CurrentHarness(root).of(value) == value


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return _project(tmp_path / "repo")


def test_a_sweep_covers_its_engine_case_model_and_adapters(root: Path) -> None:
    attn, norm = _recorded(root, ATTN), _recorded(root, NORM)
    assert parse(attn) == ("arm=CallArm", "case=attn_case", "engine")
    assert parse(norm) == ("arm=GraphArm", "case=norm_case", "engine")
    assert attn != norm
    assert _current(root, attn) and _current(root, norm)


def test_moving_code_or_adding_a_sweep_supersedes_nothing(root: Path) -> None:
    attn, norm = _recorded(root, ATTN), _recorded(root, NORM)
    whole_file = harness_fingerprint(root)
    # attn_inputs moves to a new module beside cases.py; cases.py imports it from there.
    moved = CASES.split("def attn_inputs")[1].split("def norm_inputs")[0]
    (root / "plug" / "inputs.py").write_text(
        '"""FIXTURE inputs."""\n\nSLAB = 64\n\n\ndef attn_inputs' + moved, encoding="utf-8"
    )
    _edit(root, "plug/cases.py", "def attn_inputs" + moved, "")
    _edit(root, "plug/cases.py", "from dataclasses import dataclass\n", "from dataclasses import dataclass\n\nfrom plug.inputs import attn_inputs\n")  # fmt: skip
    # A new sweep with a case model of its own, and another sweep's grid edited.
    _edit(root, "plug/sweeps.py", "n = (1, 2, 4)", "n = (1, 2, 4, 8)")
    _edit(root, "plug/sweeps.py", '"norm": {', '"new": {"case": "fx-new", "axes": {}, "arms": {}},\n    "norm": {')  # fmt: skip
    (root / "plug" / "newcase.py").write_text("def new_case(fields):\n    return fields\n")
    assert _current(root, attn) and _current(root, norm)
    # The whole-file rule would have superseded every run for the move alone.
    assert harness_fingerprint(root) != whole_file


def test_changing_an_input_maker_supersedes_exactly_its_sweeps(root: Path) -> None:
    attn, norm = _recorded(root, ATTN), _recorded(root, NORM)
    _edit(root, "plug/cases.py", '"""The attn case\'s inputs."""', "# a comment, reworded")
    assert _current(root, attn) and _current(root, norm)  # docs and comments are no code
    _edit(root, "plug/cases.py", "seed + i for i", "seed + 2 * i for i")
    assert not _current(root, attn)
    assert _current(root, norm)
    # A constant the input maker reads is part of it too.
    attn = _recorded(root, ATTN)
    _edit(root, "plug/cases.py", "SLAB = 64", "SLAB = 128")
    assert not _current(root, attn) and _current(root, norm)


def test_changing_an_adapter_supersedes_the_sweeps_that_time_it(root: Path) -> None:
    attn, norm = _recorded(root, ATTN), _recorded(root, NORM)
    _edit(root, "plug/adapters.py", "max(inputs)", "min(inputs)")
    assert _current(root, attn) and not _current(root, norm)
    # An adapter the tree no longer defines: its runs are superseded, not judged as current.
    attn = _recorded(root, ATTN)
    _edit(root, "plug/adapters.py", "class CallArm:", "class CallAdapter:")
    assert not _current(root, attn)


def test_an_engine_change_supersedes_every_timing_run(root: Path, tmp_path: Path) -> None:
    import shutil

    # The engine judged is the tree's own lib/tether/bench when the tree is a tether checkout.
    engine = root / "lib" / "tether" / "bench"
    shutil.copytree(bench_dir(None), engine)
    (root / "lib" / "tether" / "store").mkdir()
    (root / "lib" / "tether" / "store" / "provenance.py").write_text("")
    assert bench_dir(root) == engine.resolve()
    attn, norm = _recorded(root, ATTN), _recorded(root, NORM)
    compile_value = recorded_value("compile", "k", {}, root, bench_dir(root))
    assert compile_value is not None and parse(compile_value) == ()
    with (engine / "engine.py").open("a", encoding="utf-8") as f:
        f.write("\nEXTRA_WARMUP = 1\n")
    assert not _current(root, attn) and not _current(root, norm)
    assert _current(root, compile_value)  # a compile run times nothing of the harness


def test_whole_file_fingerprints_keep_the_whole_file_rule(root: Path) -> None:
    legacy = harness_fingerprint(root)
    attn = _recorded(root, ATTN)
    current = CurrentHarness(root)
    assert current.of(legacy) == legacy  # a sha256: run is judged against the whole files
    assert current.of("sha256:" + "0" * 64) == legacy  # and another harness's is superseded
    _edit(root, "plug/adapters.py", "max(inputs)", "min(inputs)")  # nothing attn covers
    assert CurrentHarness(root).of(legacy) != legacy
    assert _current(root, attn)


def test_store_show_judges_each_run_by_its_format(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    legacy = make_sweep_run(name="attn", root=root, store=store)
    assert legacy.harness_fingerprint == harness_fingerprint(root)  # no live covers: old rule
    per_sweep = resealed(legacy, provenance={"harness_fingerprint": _recorded(root, ATTN)})
    write_run(per_sweep, store)

    def superseded(run_id: str) -> bool:
        code, out, err = run_cli(root, "--store", str(store), "store", "show", run_id, "--json")
        assert code == 0, err
        return bool(json.loads(out)["superseded"])

    assert not superseded(legacy.id) and not superseded(per_sweep.id)
    _edit(root, "plug/adapters.py", "max(inputs)", "min(inputs)")  # the norm sweep's adapter
    assert superseded(legacy.id)  # the whole-file rule: any harness file changed
    assert not superseded(per_sweep.id)


def test_covers_by_kind_and_what_cannot_be_named(root: Path) -> None:
    reg = _registry(root)
    assert run_covers("compile", "k", {}, reg) == ()
    assert run_covers("verify", "v", {"command": []}, reg) == ("engine",)
    assert run_covers("sweep", "s", {**ATTN, "arms": {"A": "nope"}}, reg) is None
    # A case model no static lookup can find (a lambda): the run records the whole-file
    # fingerprint, which never misses a change.
    reg.cases["fx-lambda"] = lambda fields: fields
    assert run_covers("sweep", "s", {**ATTN, "case": "fx-lambda"}, reg) is None
    cfg = {**ATTN, "case": "fx-lambda"}
    assert recorded_value("sweep", "s", cfg, root, bench_dir(root), reg) is None


def test_the_schema_takes_both_formats_and_nothing_else(root: Path) -> None:
    from tether.errors import RunFileError
    from tether.store import validate_run

    run = make_sweep_run(name="attn", root=root)
    validate_run(resealed(run, provenance={"harness_fingerprint": _recorded(root, ATTN)}))
    for bad in ("harness/2:case=a b:" + "0" * 64, "harness/3:engine:" + "0" * 64, "sha256:"):
        with pytest.raises(RunFileError, match=r"provenance\.harness_fingerprint"):
            validate_run(resealed(run, provenance={"harness_fingerprint": bad}))
