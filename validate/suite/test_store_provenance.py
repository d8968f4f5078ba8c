"""Provenance: AST fingerprints, git state, runtime versions and ids (on FIXTURE trees)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tether.errors import RunFileError, UnknownArchError
from tether.store import CurrentHarness, harness_fingerprint, kernels_fingerprint, new_run
from tether.store.provenance import PRESENTATION_SOURCES, git_state, runtime_versions

from validate.suite.fixture_project import REPO, fixture_project
from validate.suite.runfactory import HELD, REFUSED

ENGINE = '''"""Timing engine."""

def time_it(fn, reps):
    """Call fn reps times."""
    return [fn() for _ in range(reps)]
'''


def _tree(root: Path, engine: str = ENGINE) -> Path:
    """A FIXTURE project whose own harness file is ``harness/engine.py`` (beside tether's own
    bench modules, which every harness fingerprint covers) and whose kernels are kernels/."""
    (root / "harness").mkdir(parents=True, exist_ok=True)
    (root / "harness" / "engine.py").write_text(engine, encoding="utf-8")
    (root / "harness" / "progress.py").write_text("BAR = 1\n", encoding="utf-8")
    triton = root / "kernels" / "triton"
    triton.mkdir(parents=True, exist_ok=True)
    (triton / "attn_fwd.py").write_text("BLOCK = 64\n", encoding="utf-8")
    fixture_project(root, harness=("harness/engine.py",), kernels=("kernels/**/*.py",))
    return root


@pytest.fixture(autouse=True)
def _no_git_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    # A lent GPU host runs this suite with a TETHER_GIT_SHA stamp; these tests make their own.
    monkeypatch.delenv("TETHER_GIT_SHA", raising=False)
    monkeypatch.delenv("TETHER_GIT_DIRTY", raising=False)


def test_fingerprint_ignores_comments_docstrings_formatting(tmp_path: Path) -> None:
    base = harness_fingerprint(_tree(tmp_path / "a"))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", base)
    cosmetic = ENGINE.replace('"""Call fn reps times."""', "# why: nothing").replace(
        "reps)]", "reps )]  # trailing comment"
    )
    assert harness_fingerprint(_tree(tmp_path / "b", cosmetic)) == base


def test_fingerprint_changes_with_code(tmp_path: Path) -> None:
    base = harness_fingerprint(_tree(tmp_path / "a"))
    changed = ENGINE.replace("range(reps)", "range(reps + 1)")
    assert harness_fingerprint(_tree(tmp_path / "b", changed)) != base


def test_presentation_modules_do_not_supersede(tmp_path: Path) -> None:
    from tether.store.provenance import harness_files

    root = _tree(tmp_path)
    assert "progress" in PRESENTATION_SOURCES
    names = {p.name for p in harness_files(root)}
    # tether's own measurement modules, never its presentation ones, plus the project's.
    assert {"engine.py", "sweep.py", "fidelity.py"} <= names and "progress.py" not in names
    base = harness_fingerprint(root)
    (root / "harness" / "progress.py").write_text("BAR = 2\n", encoding="utf-8")
    assert harness_fingerprint(root) == base  # not a declared harness file


def test_kernel_fingerprint_and_missing_files(tmp_path: Path) -> None:
    root = _tree(tmp_path / "a")
    empty = fixture_project(tmp_path / "empty", kernels=())
    base_empty = kernels_fingerprint(empty)
    assert kernels_fingerprint(fixture_project(tmp_path / "e2", kernels=())) == base_empty
    base = kernels_fingerprint(root)
    (root / "kernels" / "arms.py").write_text("ARMS = ()\n", encoding="utf-8")
    assert kernels_fingerprint(root) != base


def test_git_state_outside_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_GIT_SHA", raising=False)
    monkeypatch.delenv("TETHER_GIT_DIRTY", raising=False)
    assert git_state(tmp_path) == ("unknown", None)


def test_git_state_stamped_for_a_tree_without_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("TETHER_GIT_SHA", sha)
    monkeypatch.setenv("TETHER_GIT_DIRTY", "0")
    assert git_state(tmp_path) == (sha, False)
    monkeypatch.setenv("TETHER_GIT_DIRTY", "1")
    assert git_state(tmp_path) == (sha, True)
    # A malformed stamp is never guessed into a sha.
    for bad_sha, bad_dirty in ((sha[:-1], "0"), ("z" * 40, "0"), (sha, "yes")):
        monkeypatch.setenv("TETHER_GIT_SHA", bad_sha)
        monkeypatch.setenv("TETHER_GIT_DIRTY", bad_dirty)
        assert git_state(tmp_path) == ("unknown", None)


def _fixture_checkout(path: Path) -> None:
    """A one-commit git checkout at ``path`` (FIXTURE) with f.py committed as ``A = 1``."""

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

    git("init", "-q")
    (path / "f.py").write_text("A = 1\n", encoding="utf-8")
    git("add", "f.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fixture")


def test_git_state_in_a_checkout(tmp_path: Path) -> None:
    _fixture_checkout(tmp_path)
    sha, dirty = git_state(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", sha) and dirty is False
    (tmp_path / "f.py").write_text("A = 2\n", encoding="utf-8")
    assert git_state(tmp_path) == (sha, True)


def test_runtime_versions_never_import_torch() -> None:
    code = (
        "import sys; from tether.store.provenance import runtime_versions;"
        "v = runtime_versions({'cuda': '13.0'});"
        "assert 'torch' not in sys.modules and v['torch'] is None and v['cuda'] == '13.0', v"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert runtime_versions()["python"].count(".") == 2


def test_new_run_id_and_provenance(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    run = new_run(
        "verify",
        "verify-kernels",
        arch="cpu",
        device="cpu: fixture",
        config={},
        results={
            "passed": 1,
            "failed": 0,
            "skipped": 0,
            "errors": 0,
            "duration_s": 0.5,
            "suite": "validate",
            "vendor": "cpu",
            "workers": 1,
            "complete": True,
        },
        started="2026-11-29T21:30:00Z",
        root=root,
        runtime={"cudnn": None},
        guard=HELD,
    )
    assert re.fullmatch(r"20261129T213000Z-verify-verify-kernels-cpu-[0-9a-f]{12}", run.id)
    assert run.id.endswith(run.digest.split(":")[1][:12])
    assert run.provenance.git_sha == "unknown"
    # A verify run covers the timing engine (the gates it runs time through it), by definition.
    assert run.harness_fingerprint.startswith("harness/2:engine:")
    assert not CurrentHarness(root).superseded(run)
    assert run.started == run.provenance.ended == "2026-11-29T21:30:00Z"


def test_new_run_refuses_bad_input(tmp_path: Path) -> None:
    root = fixture_project(tmp_path)
    with pytest.raises(UnknownArchError, match="volta"):
        new_run("verify", "v", arch="volta", device="x", config={}, root=root, guard=HELD)
    with pytest.raises(RunFileError, match=r"provenance\.device"):
        new_run("probe", "p", arch="cpu", device="a | b", config={}, status="not_measured",
                reason="busy", root=root, guard=REFUSED)  # fmt: skip


def test_source_digest_is_the_same_text_on_every_python() -> None:
    # Golden text: ast.dump differs between interpreters (3.12 adds type_params=[] to every
    # function), which once made runs from a host with another Python look superseded.
    from tether.store.provenance import source_digest

    text = source_digest('def f(x):\n    """doc"""\n    return x + 1  # why\n')
    assert text == (
        "Module(body=[FunctionDef(name='f',args=arguments(args=[arg(arg='x')]),"
        "body=[Return(value=BinOp(left=Name(id='x'),op=Add(),right=Constant(value=1)))])])"
    )


def test_a_stamp_wins_over_a_stale_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lent host's copy carried a .git that still named an older commit; the sender's stamp
    # says what was copied and must be what the run records.
    _fixture_checkout(tmp_path)
    (tmp_path / "f.py").write_text("A = 2\n", encoding="utf-8")  # the copy is newer
    stale, _ = git_state(tmp_path)
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("TETHER_GIT_SHA", sha)
    monkeypatch.setenv("TETHER_GIT_DIRTY", "0")
    assert sha != stale and git_state(tmp_path) == (sha, False)
    # A malformed stamp is ignored: the checkout's own state stands.
    monkeypatch.setenv("TETHER_GIT_DIRTY", "maybe")
    assert git_state(tmp_path) == (stale, True)


def test_the_guard_holder_record_names_the_stamped_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One rule for "which commit is this": the guard's holder record must not consult git on
    # its own (on a lent host it named a stale commit while the runs named the right one).
    from tether.guard import lock

    sha = "89abcdef0123456789abcdef0123456789abcdef"
    monkeypatch.setenv("TETHER_GIT_SHA", sha)
    monkeypatch.setenv("TETHER_GIT_DIRTY", "0")
    assert lock._git_sha() == sha


def _verify_run(root: Path):
    results = {"passed": 1, "failed": 0, "skipped": 0, "errors": 0, "duration_s": 0.5,
               "suite": "validate", "vendor": "cpu", "workers": 1, "complete": True}  # fmt: skip
    return new_run(
        "verify", "v", arch="cpu", device="cpu", config={}, results=results, root=root, guard=HELD
    )


def test_new_run_records_the_environment_that_changes_a_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    run = _verify_run(root)
    env = run.provenance.environment
    assert env is not None
    assert env["TRITON_INTERPRET"] == "1" and env["OMP_NUM_THREADS"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["HIP_VISIBLE_DEVICES"] is None
    assert env["cpu_count"] == str(os.cpu_count())
    # It round-trips through the file format, and the digest covers it.
    from tether.store.model import Run

    again = Run.from_json(json.loads(run.dumps()))
    assert again.provenance.environment == env and again.digest == run.digest
    edited = json.loads(run.dumps())
    edited["provenance"]["environment"]["OMP_NUM_THREADS"] = "64"
    with pytest.raises(RunFileError, match="digest"):
        Run.from_json(edited)


def test_runs_without_an_environment_keep_loading_with_their_digests() -> None:
    """Every run committed before provenance.environment existed loads, digest unchanged."""
    from tether.store.io import read_run_data, store_files
    from tether.store.model import Run

    older = store_files(REPO / "results")[:25]  # either form: <id>.json or <id>.json.gz
    assert older, "FIXTURE: the repository's store has runs"
    for path in older:
        data = read_run_data(path)
        if "environment" in data["provenance"]:
            continue
        run = Run.load(path)
        assert run.provenance.environment is None
        assert "environment" not in run.to_json()["provenance"]
        assert json.loads(run.dumps()) == data, path


def test_a_bad_environment_entry_names_its_field(tmp_path: Path) -> None:
    from tether.store.model import Run

    data = json.loads(_verify_run(_tree(tmp_path)).dumps())
    data["provenance"]["environment"]["not a name"] = "1"
    with pytest.raises(RunFileError, match=r"provenance\.environment\.not a name"):
        Run.from_json(data)
