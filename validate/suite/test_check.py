"""The drift corpus: each way published text can drift from the store, and ``tether check`` on it.

Every test builds a FIXTURE checkout in tmp_path (the real templates and policy.py, a made-up
store from runfactory, the docs rendered from it), confirms it is clean, applies one drift, and
asserts that the check fails and names the place. The check runs in-process through the CLI.
Figures typed below are FIXTURE text that the scanner must catch; their lines carry the allow
marker so that they read as deliberate.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from tether.cli import main
from tether.policy import Evidence, Gate, Population, Threshold
from tether.store import Run, write_run
from tether_kernels import gates, policy

from validate.suite.fixture_project import fixture_project
from validate.suite.runfactory import (
    UNGUARDED,
    make_gate_run,
    make_sweep_run,
    resealed,
)

REPO = Path(__file__).resolve().parents[2]
POLICY_FILE = REPO / "kernels" / "tether_kernels" / "policy.py"
GATES_FILE = REPO / "kernels" / "tether_kernels" / "gates.py"
SWEEP = "prefill-vs-sdpa"
OLD_HARNESS = "sha256:" + "0" * 64  # FIXTURE: a harness that no longer exists
AXES = {"seqlen": [2048, 4096]}
FIXED = {"batch": 1, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "f16", "causal": True}
POLICY_REGION = "policy-single-prefill-sm90"
GATE_REGION = "gate-sm90-api-chunked-1k-16k"

# The FIXTURE's live threshold stands in for the policy file's sm90 one; the other thresholds
# are kept unset (their evidence is the real store's, not this fixture's), so every marker in
# the file still names a region.
_LIVE = (
    Threshold(
        region=POLICY_REGION,
        arch="sm90",
        entry="single_prefill",
        arm="triton",
        otherwise="sdpa_flash",  # the FIXTURE sweep's A arm: its evidence times it as A
        takes=(("qo_len", ">=", 2048),),
        evidence=Evidence(
            sweep=SWEEP,
            population=Population(
                name="fixture-pop", entry="single_prefill", where=(("qo_len", ">=", 2048),)
            ),
            predicates=("geomean_win", "no_loss_outside_floor"),
        ),
    ),
)
FIXTURE_POLICY = _LIVE + tuple(
    replace(th, takes=None) for th in policy.POLICY if th.region != POLICY_REGION
)


CALL = {"seqlen": 4096}  # the gated FIXTURE call (the gate runs' single cell)


# The policy file's other gates, unset (as the other thresholds): their markers stay in the file.
OTHER_GATES = tuple(
    replace(g, threshold=None, before_run=None, after_run=None)
    for g in gates.GATES
    if g.region != GATE_REGION
)


def fixture_gates(
    threshold: float | None, before: str | None, after: str | None
) -> tuple[Gate, ...]:
    return (
        *OTHER_GATES,
        Gate(
            id="fixture-gate",
            region=GATE_REGION,
            arch="sm90",
            arm="triton",
            case="attention",
            call=CALL,
            threshold=threshold,
            before_run=before,
            after_run=after,
        ),
    )


@dataclass
class Checkout:
    """A FIXTURE checkout: ``root`` with rendered docs, ``store`` with its runs."""

    root: Path
    store: Path
    sweep: Run
    before: Run
    after: Run
    replicate: Run

    def check(self) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--root", str(self.root), "--store", str(self.store), "check"], out, err)
        return code, out.getvalue(), err.getvalue()

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path


def _render_into(root: Path, store: Path) -> None:
    from tether.render import render_all

    for rel, content in render_all(root, store).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Checkout:
    root = tmp_path / "repo"
    store = tmp_path / "store"
    fixture_project(root, policy=["kernels/policy.py", "kernels/gates.py"])
    # Real templates and the real policy file: the corpus drifts what users would drift.
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    (root / "kernels").mkdir()
    shutil.copy2(POLICY_FILE, root / "kernels" / "policy.py")
    shutil.copy2(GATES_FILE, root / "kernels" / "gates.py")
    sweep = make_sweep_run(name=SWEEP, axes=AXES, fixed=FIXED, ratio=0.5, store=store, root=root)
    # A replicate run of the same commit (older, so the cited run stays ``sweep``): a band
    # from one run is provisional and backs no policy.
    replicate = make_sweep_run(
        name=SWEEP,
        axes=AXES,
        fixed=FIXED,
        ratio=0.5,
        seed=1,
        started="2025-12-31T00:00:00Z",
        store=store,
        root=root,
    )
    before = make_gate_run(
        name="fixture-gate",
        measured=100e12,
        call=CALL,
        started="2026-01-01T00:00:00Z",
        store=store,
        root=root,
    )
    after = make_gate_run(
        name="fixture-gate",
        measured=200e12,
        call=CALL,
        started="2026-01-02T00:00:00Z",
        store=store,
        root=root,
    )
    # The policy under test is the FIXTURE's: a live threshold and a gate set between two runs.
    monkeypatch.setattr(policy, "POLICY", FIXTURE_POLICY)
    monkeypatch.setattr(gates, "GATES", fixture_gates(150e12, before.id, after.id))
    _render_into(root, store)
    made = Checkout(
        root=root, store=store, sweep=sweep, before=before, after=after, replicate=replicate
    )
    code, out, err = made.check()
    assert code == 0, f"FIXTURE checkout is not clean:\n{out}{err}"
    return made


def test_clean_fixture_passes(checkout: Checkout) -> None:
    code, out, _ = checkout.check()
    assert code == 0
    assert "clean" in out


def test_number_edited_inside_generated_region(checkout: Checkout) -> None:
    readme = checkout.root / "README.md"
    text = readme.read_text(encoding="utf-8")
    index = next(i for i, ch in enumerate(text) if ch.isdigit())
    edited = text[:index] + ("7" if text[index] != "7" else "8") + text[index + 1 :]
    readme.write_text(edited, encoding="utf-8")
    code, out, _ = checkout.check()
    assert code == 1
    assert "--- README.md (on disk)" in out
    assert "+++ README.md (rendered from results/)" in out
    line = text[:index].count("\n") + 1
    assert f"README.md:{line}: differs" in out
    assert "tether render" in out


def test_number_edited_inside_policy_comment_region(checkout: Checkout) -> None:
    path = checkout.root / "kernels" / "policy.py"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if f"BEGIN GENERATED: {POLICY_REGION}" in line)
    end = next(i for i, line in enumerate(lines) if f"END GENERATED: {POLICY_REGION}" in line)
    body = [i for i in range(start + 1, end) if any(ch.isdigit() for ch in lines[i])]
    assert body, "FIXTURE: the rendered policy comment should carry numbers"
    i = body[0]
    lines[i] = "".join("9" if ch.isdigit() else ch for ch in lines[i])
    path.write_text("".join(lines), encoding="utf-8")
    code, out, _ = checkout.check()
    assert code == 1
    assert f"kernels/policy.py:{i + 1}: differs" in out


def test_stale_figure_in_markdown_paragraph(checkout: Checkout) -> None:
    checkout.write(
        "NOTES.md", "# Notes\n\nTriton now beats cuDNN by 1.21x here.\n"
    )  # tether: allow-figure
    code, out, _ = checkout.check()
    assert code == 1
    assert "NOTES.md:3: ratio figure" in out


def test_stale_figure_in_python_comment(checkout: Checkout) -> None:
    path = checkout.root / "kernels" / "policy.py"
    path.write_text(
        path.read_text(encoding="utf-8")
        + "# triton clears 390 TFLOP/s here\n",  # tether: allow-figure
        encoding="utf-8",
    )
    lines = path.read_text(encoding="utf-8").count("\n")
    code, out, _ = checkout.check()
    assert code == 1
    assert f"kernels/policy.py:{lines}: throughput figure unit" in out


def test_stale_figure_in_docstring(checkout: Checkout) -> None:
    checkout.write(
        "lib/notes.py",
        '"""Helpers.\n\nThe deferred rescale is 12% faster on sm90.\n"""\n',  # tether: allow-figure
    )
    code, out, _ = checkout.check()
    assert code == 1
    assert "lib/notes.py:3: percentage beside a performance word" in out


def test_claim_word_typed_by_hand(checkout: Checkout) -> None:
    checkout.write(
        "NOTES.md", "Throughput rises monotonically with kv_len.\n"
    )  # tether: allow-figure
    code, out, _ = checkout.check()
    assert code == 1
    assert "NOTES.md:1: claim word" in out


def test_raw_sample_edited_in_run_file(checkout: Checkout) -> None:
    assert checkout.sweep.path is not None
    data = json.loads(checkout.sweep.path.read_text(encoding="utf-8"))
    # One raw sample, by one percent: no published figure need move, the digest does.
    data["cells"][0]["samples"]["B"][0] *= 1.01
    checkout.sweep.path.write_text(json.dumps(data), encoding="utf-8")
    code, out, _ = checkout.check()
    assert code == 1
    assert f"{checkout.sweep.path.name}:1: malformed run: digest: does not match" in out


def test_a_resealed_edit_breaks_the_id_and_every_citation(checkout: Checkout) -> None:
    from tether.store.model import digest_of

    assert checkout.sweep.path is not None
    data = json.loads(checkout.sweep.path.read_text(encoding="utf-8"))
    for cell in data["cells"]:  # B slower than A everywhere, digest recomputed by a forger
        cell["samples"]["B"] = [s * 4.0 for s in cell["samples"]["B"]]
    data["digest"] = digest_of(data)
    checkout.sweep.path.write_text(json.dumps(data), encoding="utf-8")
    code, out, _ = checkout.check()
    assert code == 1
    assert "ids are content-addressed" in out


def test_an_unguarded_run_is_never_policy_evidence(checkout: Checkout) -> None:
    assert checkout.sweep.path is not None and checkout.replicate.path is not None
    checkout.sweep.path.unlink()
    checkout.replicate.path.unlink()
    make_sweep_run(
        name=SWEEP, axes=AXES, fixed=FIXED, ratio=0.5, guard=UNGUARDED,
        store=checkout.store, root=checkout.root,
    )  # fmt: skip
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert "with no guarded ok run (unguarded runs are never evidence)" in out


def test_a_threshold_lowered_below_its_evidence_fails(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The evidence covers qo_len 2048 and 4096; routing from 16 on routes calls nobody measured.
    lowered = (replace(_LIVE[0], takes=(("qo_len", ">=", 16),)), *FIXTURE_POLICY[1:])
    monkeypatch.setattr(policy, "POLICY", lowered)
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert "applies outside its evidence" in out
    assert "qo_len >= 16 starts below the evidence, whose cells begin at qo_len 2048" in out


def test_a_throttled_gate_measurement_is_no_before_or_after(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    hot = make_gate_run(
        name="fixture-gate", measured=210e12, call=CALL, flags=("clock_throttled",),
        started="2026-01-03T00:00:00Z", store=checkout.store, root=checkout.root,
    )  # fmt: skip
    monkeypatch.setattr(gates, "GATES", fixture_gates(150e12, checkout.before.id, hot.id))
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert "cell ran clock throttled; a throttled cell is never a gate's before or after" in out


def test_a_marker_that_no_target_renders_is_an_error(checkout: Checkout) -> None:
    path = checkout.root / "kernels" / "policy.py"
    path.write_text(
        path.read_text(encoding="utf-8")
        + "# BEGIN GENERATED: nobody-renders-this (tether render)\n# END GENERATED: nobody-renders-this\n",
        encoding="utf-8",
    )
    code, out, _ = checkout.check()
    assert code == 1
    assert "nobody-renders-this" in out and "no target renders this region" in out


def test_a_figure_typed_into_a_template_is_caught(checkout: Checkout) -> None:
    partial = checkout.root / "docs_src" / "partials" / "usage.md.j2"
    partial.write_text(
        partial.read_text(encoding="utf-8")
        + "\nOn an H200 it is 1.21 times faster than cuDNN.\n",  # tether: allow-figure
        encoding="utf-8",
    )
    _render_into(checkout.root, checkout.store)  # the README now carries it, and agrees
    code, out, _ = checkout.check()
    assert code == 1
    assert "docs_src/partials/usage.md.j2:" in out and "ratio figure in words" in out


@pytest.mark.parametrize(
    "typed",
    [
        pytest.param("It runs 21 percent faster.", id="percent-in-words"),  # tether: allow-figure
        pytest.param("That is 0.91 ms per call.", id="latency-per-call"),  # tether: allow-figure
        pytest.param(
            "Every tile gains on every square shape.", id="claim-over-a-set"
        ),  # tether: allow-figure
        pytest.param(
            "Four stages are level at 1K to 4K.", id="level-claim"
        ),  # tether: allow-figure
        pytest.param(
            "The goal is met only at the short end.", id="goal-claim"
        ),  # tether: allow-figure
    ],
)
def test_phrasings_of_hand_typed_outcomes_are_caught(checkout: Checkout, typed: str) -> None:
    checkout.write("kernels/NOTES.md", f"# Notes\n\n{typed}\n")
    code, out, _ = checkout.check()
    assert code == 1
    assert "kernels/NOTES.md:3:" in out


def test_run_deleted(checkout: Checkout) -> None:
    assert checkout.sweep.path is not None and checkout.replicate.path is not None
    checkout.sweep.path.unlink()
    checkout.replicate.path.unlink()
    code, out, _ = checkout.check()
    assert code == 1
    assert f"sweep {SWEEP!r} with no guarded ok run" in out


def test_a_policy_resting_on_one_run_is_provisional(checkout: Checkout) -> None:
    # Deleting the replicate narrows the band to one run's: the verdict is provisional, and a
    # provisional verdict backs no policy, even re-rendered.
    assert checkout.replicate.path is not None
    checkout.replicate.path.unlink()
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert "provisional: the band rests on 1 run, not 2" in out
    region = (checkout.root / "kernels" / "policy.py").read_text(encoding="utf-8")
    assert "# provisional: one run" in region


def test_evidence_that_timed_other_arms_is_a_finding(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Swap the threshold's arm to the evidence run's A arm: gluon's sweep would be presented
    # as triton's evidence, or here sdpa_flash's as triton's.
    swapped = (replace(_LIVE[0], arm="sdpa_flash", otherwise="triton"), *FIXTURE_POLICY[1:])
    monkeypatch.setattr(policy, "POLICY", swapped)
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert (
        "timed B = 'triton' against A = 'sdpa_flash', not the threshold's arm 'sdpa_flash' "
        "against its otherwise 'triton'" in out
    )


def test_flagged_cells_never_count_toward_a_predicate(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.stats import aggregate, cell_stats, evaluate

    flagged = dataclasses.replace(
        checkout.sweep,
        cells=tuple(
            dataclasses.replace(c, flags=("kernel_mismatch",)) for c in checkout.sweep.cells
        ),
    )
    evidence = _LIVE[0].evidence
    ok, why = evaluate(evidence, flagged, [checkout.replicate])
    assert not ok and "is empty" in why
    whole = aggregate(cell_stats(flagged), evidence.population)
    assert whole.count > 0  # shown, but not evidence
    assert aggregate(cell_stats(flagged), evidence.population, trusted_only=True).untrusted


def test_gate_run_deleted(checkout: Checkout) -> None:
    assert checkout.before.path is not None
    checkout.before.path.unlink()
    code, out, _ = checkout.check()
    assert code == 1
    assert f"before run {checkout.before.id!r} is not in the store" in out


def test_gate_threshold_outside_its_before_and_after(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        gates, "GATES", fixture_gates(250e12, checkout.before.id, checkout.after.id)
    )
    _render_into(checkout.root, checkout.store)  # the docs agree; only the bracket is wrong
    code, out, _ = checkout.check()
    assert code == 1
    assert "gate fixture-gate: threshold 250.0 TFLOP/s is not clear of both bands" in out


def test_superseded_run_cited_as_current_by_policy(checkout: Checkout) -> None:
    assert checkout.sweep.path is not None
    checkout.sweep.path.unlink()
    old = make_sweep_run(name=SWEEP, axes=AXES, fixed=FIXED, ratio=0.5, root=checkout.root)
    old = resealed(old, provenance={"harness_fingerprint": OLD_HARNESS})
    write_run(old, checkout.store)
    _render_into(checkout.root, checkout.store)  # rendered docs mark it; the policy still cites it
    code, out, _ = checkout.check()
    assert code == 1
    assert "kernels/policy.py:" in out
    assert f"rests on run {old.id} from a superseded harness" in out


def test_malformed_run_names_the_file(checkout: Checkout) -> None:
    assert checkout.sweep.path is not None
    text = checkout.sweep.path.read_text(encoding="utf-8")
    checkout.sweep.path.write_text(text[: len(text) // 2], encoding="utf-8")
    code, out, _ = checkout.check()
    assert code == 1
    assert checkout.sweep.path.name in out
    assert "malformed run" in out


def test_unknown_option_is_usage_error(checkout: Checkout) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(checkout.root), "check", "--no-such-flag"], out, err)
    assert code == 2


def test_check_imports_no_gpu_code(checkout: Checkout) -> None:
    # A fresh interpreter: the test process itself may have torch loaded by other tests.
    probe = (
        "import io, sys\n"
        "from tether.cli import main\n"
        f"code = main(['--root', {str(checkout.root)!r}, '--store', {str(checkout.store)!r}, 'check'],"
        " io.StringIO(), io.StringIO())\n"
        "loaded = sorted(m for m in ('torch', 'triton') if m in sys.modules)\n"
        "print(code, loaded)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # The fixture policy is not patched in here, so the exit code may be 1; imports are the point.
    assert done.stdout.split(" ", 1)[1].strip() == "[]", done.stdout


def test_a_tuning_region_whose_run_is_not_in_the_store_is_a_finding(tmp_path: Path) -> None:
    # kernels/NOTES.md cites a tuning run by its marker; against a store without that run the
    # region renders as saying so (a fixture store must still render) and the check fails.
    from tether.check import run_check

    store = tmp_path / "empty"
    store.mkdir()
    found = [f.what for f in run_check(REPO, store)]
    assert any("cites tuning run" in m and "not in the store" in m for m in found), found
    assert not any("cannot render" in m for m in found), found


def test_a_scope_naming_values_its_evidence_lacks_fails(
    checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The evidence holds one dtype and one head_dim; a scope that routes another of each routes
    # calls nobody measured, though every lower bound is covered.
    fixed = dict(FIXED)
    wider = (
        ("dtype", "in", (fixed["dtype"], "f32")),
        ("head_dim", "==", int(fixed["head_dim"]) * 2),
    )
    widened = (replace(_LIVE[0], scope=_LIVE[0].scope + wider), *FIXTURE_POLICY[1:])
    monkeypatch.setattr(policy, "POLICY", widened)
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 1
    assert "dtype f32 is routed but no evidence cell has it" in out
    assert f"head_dim {int(fixed['head_dim']) * 2} is routed but no evidence cell has it" in out


def test_a_threshold_resting_on_stale_kernel_evidence_fails(checkout: Checkout) -> None:
    # The evidence runs were measured from other kernel sources than the checkout's, and the
    # FIXTURE is no git checkout, so which files changed cannot be told: stale. (With a run of
    # the checkout's kernels left, that one would be cited: see the next test.)
    assert checkout.sweep.path is not None and checkout.replicate.path is not None
    checkout.sweep.path.unlink()
    checkout.replicate.path.unlink()
    old = resealed(checkout.sweep, provenance={"kernels_fingerprint": "sha256:" + "0" * 64})
    write_run(old, checkout.store)
    _render_into(checkout.root, checkout.store)  # the documents mark it stale
    code, out, _ = checkout.check()
    assert code == 1
    assert f"stale timing evidence: run {old.id} (policy {POLICY_REGION} rests on it)" in out


def test_a_newer_run_of_other_kernels_does_not_hide_the_current_evidence(
    checkout: Checkout,
) -> None:
    # An exploration measured on kernels since reverted leaves a newer run of the evidence
    # sweep from other kernel sources; the threshold still rests on the run of the kernels as
    # they are, the documents cite that one, and the check passes.
    def day_later(stamp: str) -> str:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00")) + timedelta(days=1)
        return then.strftime("%Y-%m-%dT%H:%M:%SZ")

    prov = checkout.sweep.provenance
    explored = resealed(
        checkout.sweep,
        provenance={
            "started": day_later(prov.started),
            "ended": day_later(prov.ended),
            "kernels_fingerprint": "sha256:" + "1" * 64,
        },
    )
    write_run(explored, checkout.store)
    _render_into(checkout.root, checkout.store)
    code, out, _ = checkout.check()
    assert code == 0, out
    policy_text = (checkout.root / "kernels" / "policy.py").read_text(encoding="utf-8")
    assert checkout.sweep.id in policy_text and explored.id not in policy_text


def test_a_front_page_row_citing_an_arm_sweep_fails(checkout: Checkout) -> None:
    """A [tool.tether.summary] row is what a caller gets: a run that times an arm (B triton)
    where its sweep declares entry points is refused; one that times the entry point passes."""
    from tether.check import check_front_page
    from tether.store import load_store

    from validate.suite.runfactory import make_sweep_run

    api = make_sweep_run(name="api-fixture", axes=AXES, fixed=FIXED,
                         arms={"A": "sdpa_flash", "B": "single_prefill"},
                         store=checkout.store, root=checkout.root)  # fmt: skip
    assert api.arms["B"] in api.config["entry_points"]
    config = checkout.root / "pyproject.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + "\n[tool.tether.summary]\nrows = [\n"
        + f'  {{ label = "arm", sweep = "{SWEEP}" }},\n'
        + '  { label = "as called", sweep = "api-fixture" },\n]\n',
        encoding="utf-8",
    )
    found = check_front_page(checkout.root, list(load_store(checkout.store)))
    assert len(found) == 1, found
    what = found[0].what
    assert "'arm'" in what and SWEEP in what and "'triton'" in what and "entry point" in what
    assert found[0].path == "pyproject.toml" and found[0].line > 1
