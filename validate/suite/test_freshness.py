"""Evidence that describes the code: a timing run is stale when a kernel file its arms use
changed since its commit, and the store is append-only against a git revision.

Every repository here is a FIXTURE made in tmp_path with git: kernel files, commits, runs.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
from pathlib import Path

import pytest
from tether.cli import main
from tether.freshness import KernelDiff, jitted_kernels, store_changes_since
from tether.store import kernels_fingerprint, write_run

from validate.suite.fixture_project import fixture_project, git
from validate.suite.runfactory import make_sweep_run, resealed

USED = '''"""Kernels the FIXTURE run ran."""
import triton


@triton.jit
def _attn_fwd(x):
    return x
'''
OTHER = '''"""A kernel the FIXTURE run never ran."""
import triton


@triton.jit
def _other_kernel(x):
    return x
'''
ARMS = '''"""Arms: no kernel here, so any change may shape any arm."""
ARMS = ("triton",)
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed for the freshness rules and is not on PATH")
    root = tmp_path / "repo"
    fixture_project(root)
    (root / "kernels").mkdir()
    (root / "kernels" / "used.py").write_text(USED, encoding="utf-8")
    (root / "kernels" / "other.py").write_text(OTHER, encoding="utf-8")
    (root / "kernels" / "arms.py").write_text(ARMS, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "FIXTURE: kernels")
    return root


def _run_at_head(root: Path):
    run = make_sweep_run(root=root)
    cells = tuple(dataclasses.replace(c, kernels={"B": ("_attn_fwd",)}) for c in run.cells)
    sha = git(root, "rev-parse", "HEAD").strip()
    return resealed(run, cells=cells, provenance={"git_sha": sha, "git_dirty": False})


def _staleness(root: Path, run):
    from tether import project

    diff = KernelDiff(root, project.get(root).kernel_files())
    return diff.staleness(run, kernels_fingerprint(root))


def test_jitted_kernels_are_found_by_their_decorator() -> None:
    assert jitted_kernels(USED) == {"_attn_fwd"}
    assert jitted_kernels(ARMS) == set()


def test_an_unchanged_checkout_is_fresh(repo: Path) -> None:
    assert not _staleness(repo, _run_at_head(repo)).stale


def test_a_changed_kernel_the_run_never_ran_does_not_stale_it(repo: Path) -> None:
    run = _run_at_head(repo)
    (repo / "kernels" / "other.py").write_text(OTHER + "\nY = 2\n", encoding="utf-8")
    found = _staleness(repo, run)
    assert not found.stale and found.unused == ("kernels/other.py",)


def test_a_changed_kernel_the_run_ran_stales_it(repo: Path) -> None:
    run = _run_at_head(repo)
    (repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 1"))
    found = _staleness(repo, run)
    assert found.stale and found.used == ("kernels/used.py",)


def test_a_changed_file_without_kernels_stales_every_run(repo: Path) -> None:
    run = _run_at_head(repo)
    (repo / "kernels" / "arms.py").write_text(ARMS + "MORE = 1\n", encoding="utf-8")
    assert _staleness(repo, run).used == ("kernels/arms.py",)


def test_a_verify_run_is_stale_by_any_kernel_that_changed(repo: Path) -> None:
    # It records no kernels, and ran them all: the kernel a sweep run never ran counts for it.
    run = _run_at_head(repo)
    verify = resealed(run, kind="verify", cells=())
    (repo / "kernels" / "other.py").write_text(OTHER + "\nY = 2\n", encoding="utf-8")
    assert not _staleness(repo, run).stale
    assert _staleness(repo, verify).used == ("kernels/other.py",)


def test_a_run_git_cannot_place_is_stale_and_says_why(repo: Path) -> None:
    run = resealed(_run_at_head(repo), provenance={"git_sha": "f" * 40})
    (repo / "kernels" / "used.py").write_text(USED + "\nZ = 1\n", encoding="utf-8")
    found = _staleness(repo, run)
    assert found.stale and found.unknown is not None and "git cannot compare" in found.unknown


def _check(root: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(root), "check", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_the_store_is_append_only_since_a_revision(repo: Path) -> None:
    store = repo / "results"
    first = write_run(make_sweep_run(root=repo), store)
    second = write_run(make_sweep_run(root=repo, seed=1, started="2026-01-02T00:00:00Z"), store)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "FIXTURE: two runs")
    git(repo, "checkout", "-q", "-b", "topic")
    assert store_changes_since(repo, store, "main") == []
    # a new run is fine; removing or editing one that main holds is not
    write_run(make_sweep_run(root=repo, seed=2, started="2026-01-03T00:00:00Z"), store)
    assert store_changes_since(repo, store, "main") == []
    Path(first).unlink()
    text = Path(second).read_text(encoding="utf-8")
    Path(second).write_text(text.replace('"ok"', '"ok" ', 1), encoding="utf-8")
    changes = dict(store_changes_since(repo, store, "main"))
    rel = {Path(p).relative_to(repo).as_posix() for p in (first, second)}
    assert set(changes) == rel
    assert any(w.startswith("removed") for w in changes.values())
    assert any(w.startswith("modified") for w in changes.values())
    code, out, _ = _check(repo, "--since", "main")
    assert code == 1 and "the store is append-only" in out
    code, _, err = _check(repo, "--since", "no-such-branch")
    assert code == 2 and "--since no-such-branch" in err


def test_a_run_naming_a_commit_whose_kernels_it_did_not_run_is_a_finding(repo: Path) -> None:
    """A lent host's copy kept an old .git, and a session stamped the runs with the commit
    that .git named: runs of new code recorded as an old commit, clean. The check computes
    the named commit's kernels fingerprint and refuses the run."""
    from tether.check import check_recorded_commits

    old = git(repo, "rev-parse", "HEAD").strip()
    honest = _run_at_head(repo)
    (repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 1"))
    git(repo, "commit", "-qam", "FIXTURE: a kernel changes")
    new = git(repo, "rev-parse", "HEAD").strip()
    measured_now = make_sweep_run(root=repo)  # the changed sources' fingerprint
    assert measured_now.provenance.kernels_fingerprint != honest.provenance.kernels_fingerprint
    stamped_old = resealed(measured_now, provenance={"git_sha": old, "git_dirty": False})
    stamped_new = resealed(measured_now, provenance={"git_sha": new, "git_dirty": False})
    dirty = resealed(measured_now, provenance={"git_sha": old, "git_dirty": True})
    unknown = resealed(measured_now, provenance={"git_sha": "f" * 40, "git_dirty": False})
    findings = check_recorded_commits(repo, [honest, stamped_old, stamped_new, dirty, unknown])
    assert [f.what.split(" records")[0] for f in findings] == [f"run {stamped_old.id}"]
    assert f"records commit {old[:12]} and a clean tree" in findings[0].what
    assert "measured from other code than it names" in findings[0].what


def test_kept_commit_fingerprints_agree_and_git_cannot_tell_is_not_kept(
    repo: Path, tmp_path: Path
) -> None:
    # The same finding with the commits' fingerprints computed, then read back from the cache
    # (a second CommitKernels); a commit git does not have is asked again, never kept.
    from tether.cache import Cache, active
    from tether.check import check_recorded_commits
    from tether.freshness import COMMIT_KERNELS, CommitKernels

    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 2"))
    git(repo, "commit", "-qam", "FIXTURE: a kernel changes")
    measured_now = make_sweep_run(root=repo)
    stamped_old = resealed(measured_now, provenance={"git_sha": old, "git_dirty": False})
    plain = check_recorded_commits(repo, [stamped_old])
    cache = Cache(tmp_path / "cache")
    with active(cache):
        first = check_recorded_commits(repo, [stamped_old])
        again = check_recorded_commits(repo, [stamped_old])
        assert CommitKernels(repo).at("f" * 40) is None
    assert [f.what for f in first] == [f.what for f in again] == [f.what for f in plain]
    assert len(plain) == 1 and cache.hits >= 1
    kept = list((tmp_path / "cache" / COMMIT_KERNELS).rglob("*"))
    assert len([p for p in kept if p.is_file()]) == 1  # the old commit's; not the unknown one


# -- arch-scoped definitions ([tool.tether.fingerprint] arch_scoped) ---------------------------

TABLES = '''"""Launch tables: no kernel here; each table serves one arch."""
_GFX = {16: (64, 32)}
SM = {16: (128, 64)}
TABLES = {"gfx1151": _GFX, "sm90": SM}


def config(arch, head_dim):
    return TABLES[arch][head_dim]
'''
SCOPED = (
    "[tool.tether.fingerprint.arch_scoped]\n"
    '"kernels/tables.py" = { _GFX = "gfx1151", SM = ["sm90"] }\n'
)


@pytest.fixture
def tables_repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed for the freshness rules and is not on PATH")
    root = tmp_path / "repo"
    fixture_project(root, extra=SCOPED)
    (root / "kernels").mkdir()
    (root / "kernels" / "used.py").write_text(USED, encoding="utf-8")
    (root / "kernels" / "tables.py").write_text(TABLES, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "FIXTURE: kernels and tables")
    return root


def _scoped_staleness(root: Path, run):
    from tether import project

    proj = project.get(root)
    return KernelDiff(root, proj.kernel_files(), proj.arch_scoped).staleness(
        run, kernels_fingerprint(root)
    )


def _edit_tables(root: Path, old: str, new: str) -> None:
    path = root / "kernels" / "tables.py"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_change_confined_to_another_archs_table_does_not_stale_a_run(tables_repo) -> None:
    run = _run_at_head(tables_repo)  # an sm90 run
    _edit_tables(tables_repo, "_GFX = {16: (64, 32)}", "_GFX = {16: (32, 16)}")
    found = _scoped_staleness(tables_repo, run)
    assert not found.stale and found.unused == ("kernels/tables.py",)


def test_a_change_to_the_runs_own_archs_table_stales_it(tables_repo) -> None:
    run = _run_at_head(tables_repo)
    _edit_tables(tables_repo, "SM = {16: (128, 64)}", "SM = {16: (64, 64)}")
    assert _scoped_staleness(tables_repo, run).used == ("kernels/tables.py",)
    # the same edit does not reach a gfx1151 run
    gfx = resealed(run, provenance={"arch": "gfx1151"})
    assert not _scoped_staleness(tables_repo, gfx).stale


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("return TABLES[arch][head_dim]", "return TABLES[arch][16]", id="function"),
        pytest.param('"sm90": SM}', '"sm90": _GFX}', id="unscoped-table"),
        pytest.param('"""Launch', 'import os\n"""Launch', id="new-statement"),
    ],
)
def test_a_change_outside_the_scoped_definitions_stales_every_run(tables_repo, old, new) -> None:
    run = _run_at_head(tables_repo)
    # beside the out-of-scope edit, one to the other arch's table: it must not hide the first
    _edit_tables(tables_repo, "_GFX = {16: (64, 32)}", "_GFX = {16: (32, 16)}")
    _edit_tables(tables_repo, old, new)
    assert _scoped_staleness(tables_repo, run).used == ("kernels/tables.py",)


def test_a_comment_inside_a_scoped_table_changes_nothing(tables_repo) -> None:
    run = _run_at_head(tables_repo)
    _edit_tables(tables_repo, "SM = {16: (128, 64)}", "SM = {16: (128, 64)}  # the v6 tile")
    assert not _scoped_staleness(tables_repo, run).stale


@pytest.mark.parametrize(
    ("value", "match"),
    [
        pytest.param('"kernels/tables.py" = "sm90"', "must map top-level names", id="not-a-table"),
        pytest.param('"kernels/tables.py" = { SM = "h100" }', "an arch name", id="bad-arch"),
        pytest.param('"kernels/tables.py" = { SM = [] }', "an arch name", id="no-arch"),
        pytest.param('"/abs/tables.py" = { SM = "sm90" }', "inside the project", id="absolute"),
    ],
)
def test_a_bad_arch_scope_is_refused_by_name(tmp_path: Path, value: str, match: str) -> None:
    from tether import project
    from tether.errors import UsageError

    root = fixture_project(
        tmp_path / "bad", extra="[tool.tether.fingerprint.arch_scoped]\n" + value + "\n"
    )
    with pytest.raises(UsageError, match=match) as info:
        project.load(root)
    assert "arch_scoped" in str(info.value)


@pytest.mark.parametrize(
    ("scope", "match"),
    [
        pytest.param('{ _GFX = "gfx1151", SM = "sm90" }', None, id="as-declared"),
        pytest.param('{ _GFXX = "gfx1151" }', "no top-level definition '_GFXX'", id="typo"),
        pytest.param('{ config = "sm90", gone = "sm90" }', "'gone'", id="one-of-two-missing"),
    ],
)
def test_check_reports_an_arch_scope_that_names_no_definition(
    tables_repo: Path, scope: str, match: str | None
) -> None:
    from tether.check import check_arch_scopes

    config = tables_repo / "pyproject.toml"
    text = config.read_text(encoding="utf-8")
    declared = '"kernels/tables.py" = { _GFX = "gfx1151", SM = ["sm90"] }'
    assert declared in text
    config.write_text(text.replace(declared, f'"kernels/tables.py" = {scope}'), encoding="utf-8")
    stat = config.stat()  # the project cache is keyed by the config's mtime: move it on
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    found = [f.what for f in check_arch_scopes(tables_repo)]
    if match is None:
        assert found == []
    else:
        assert len(found) == 1 and match in found[0] and "kernels/tables.py" in found[0]


def test_check_reports_an_arch_scope_on_a_file_the_fingerprint_does_not_cover(
    tmp_path: Path,
) -> None:
    from tether.check import check_arch_scopes

    root = fixture_project(
        tmp_path / "outside",
        extra='[tool.tether.fingerprint.arch_scoped]\n"docs/tables.py" = { SM = "sm90" }\n',
    )
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "tables.py").write_text("SM = 1\n", encoding="utf-8")
    found = [f.what for f in check_arch_scopes(root)]
    assert len(found) == 1 and "not one of the kernel files" in found[0]


# -- compile runs: stale only through the kernel files they compile from ---------------------

COMPILED = ("kernels/used.py", "kernels/tables.py")


@pytest.fixture
def compile_repo(tmp_path: Path) -> Path:
    """The kernels above, the arch-scoped tables, and [tool.tether.fingerprint] compiled naming
    the kernel the compile runs compile and the tables that enumerate its variants."""
    if shutil.which("git") is None:
        pytest.fail("git is needed for the freshness rules and is not on PATH")
    root = tmp_path / "repo"
    fixture_project(root, extra=SCOPED, compiled=COMPILED)
    (root / "kernels").mkdir()
    for name, text in (("used", USED), ("other", OTHER), ("arms", ARMS), ("tables", TABLES)):
        (root / "kernels" / f"{name}.py").write_text(text, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "FIXTURE: kernels, tables, compiled inputs")
    return root


def _compile_run_at_head(root: Path, arch: str = "sm90", version: str = "3.6.0"):
    """FIXTURE: an ok compile run of attn-fwd made at HEAD from a clean tree."""
    from tether.store import Cell, GuardRecord, new_run

    cell = Cell(
        key={"head_dim": 64, "dtype": "f16", "config": "m64 n32 w4 s1"},
        work=0.0,
        samples={},
        kernels={"compiled": ("_attn_fwd",)},
        extra={"spills": 0, "lds_bytes": 16384, "lds_limit_bytes": 65536, "vgprs_total": 128,
               "loops": [{"blocks": 1, "matrix": 16, "fma": 0}],
               "occupancy": {"waves_per_simd": 4, "limited_by": "registers", "by": {}}},
    )  # fmt: skip
    summary = {
        "compiler": "triton", "compiler_version": version, "target": f"{arch}:fixture",
        "variants": 1, "spills_total": 0, "variants_spilling": 0, "variants_over_lds": 0,
        "variants_loop_without_matrix": 0, "occupancy_min": 1, "occupancy_max": 1,
        "occupancy_unit": "waves per SIMD", "seconds": 1.0,
    }  # fmt: skip
    run = new_run(
        "compile",
        "attn-fwd",
        arch=arch,
        device="FIXTURE: no device",
        config={},
        cells=[cell],
        results=summary,
        guard=GuardRecord(mode="unguarded", reason="FIXTURE: compiled without a GPU"),
        root=root,
        host="fixture-host",
    )
    sha = git(root, "rev-parse", "HEAD").strip()
    return resealed(run, provenance={"git_sha": sha, "git_dirty": False})


def _fresh(root: Path):
    from tether.freshness import CompileFreshness

    return CompileFreshness(root)


def test_a_compile_run_outlives_a_change_to_what_it_does_not_compile(compile_repo) -> None:
    run, timing = _compile_run_at_head(compile_repo), _run_at_head(compile_repo)
    (compile_repo / "kernels" / "arms.py").write_text(ARMS + "MORE = 1\n", encoding="utf-8")
    (compile_repo / "kernels" / "other.py").write_text(OTHER + "\nY = 2\n", encoding="utf-8")
    found = _fresh(compile_repo).staleness(run)
    assert not found.stale and found.unused == ("kernels/arms.py", "kernels/other.py")
    # a timing run is another matter: arms.py defines no kernel, so it may shape any arm
    assert _scoped_staleness(compile_repo, timing).used == ("kernels/arms.py",)


def test_a_change_to_the_compiled_kernel_stales_the_compile_run(compile_repo) -> None:
    run = _compile_run_at_head(compile_repo)
    (compile_repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 1"))
    found = _fresh(compile_repo).staleness(run)
    assert found.stale and found.used == ("kernels/used.py",)


def test_a_compile_run_keeps_the_arch_scopes(compile_repo) -> None:
    sm90, gfx = _compile_run_at_head(compile_repo), _compile_run_at_head(compile_repo, "gfx1151")
    _edit_tables(compile_repo, "_GFX = {16: (64, 32)}", "_GFX = {16: (32, 16)}")
    fresh = _fresh(compile_repo)
    assert not fresh.stale(sm90) and fresh.staleness(gfx).used == ("kernels/tables.py",)


def test_undeclared_compile_inputs_are_every_kernel_file(repo: Path) -> None:
    run = _compile_run_at_head(repo)
    (repo / "kernels" / "other.py").write_text(OTHER + "\nY = 2\n", encoding="utf-8")
    assert _fresh(repo).staleness(run).used == ("kernels/other.py",)


def test_a_compile_run_from_a_dirty_tree_is_stale_once_the_kernels_change(compile_repo) -> None:
    run = resealed(_compile_run_at_head(compile_repo), provenance={"git_dirty": True})
    assert not _fresh(compile_repo).stale(run)  # the same sources: its fingerprint is current
    (compile_repo / "kernels" / "arms.py").write_text(ARMS + "MORE = 1\n", encoding="utf-8")
    found = _fresh(compile_repo).staleness(run)
    assert found.stale and "dirty tree" in (found.unknown or "")


def test_fresh_compile_run_matches_the_compiler_and_the_sources(compile_repo) -> None:
    from tether.freshness import fresh_compile_run

    run = _compile_run_at_head(compile_repo)
    assert fresh_compile_run(_fresh(compile_repo), [run], "attn-fwd", "sm90", "triton 3.6.0") is run
    assert (
        fresh_compile_run(_fresh(compile_repo), [run], "attn-fwd", "sm90", "triton 3.9.0") is None
    )
    assert (
        fresh_compile_run(_fresh(compile_repo), [run], "attn-fwd", "gfx942", "triton 3.6.0") is None
    )
    (compile_repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 1"))
    assert (
        fresh_compile_run(_fresh(compile_repo), [run], "attn-fwd", "sm90", "triton 3.6.0") is None
    )


def test_check_holds_compile_evidence_to_its_inputs(compile_repo) -> None:
    from tether.check import check_compile_evidence

    run = _compile_run_at_head(compile_repo)
    (compile_repo / "kernels" / "arms.py").write_text(ARMS + "MORE = 1\n", encoding="utf-8")
    assert check_compile_evidence(compile_repo, [run]) == []
    (compile_repo / "kernels" / "used.py").write_text(USED.replace("return x", "return x + 1"))
    (finding,) = check_compile_evidence(compile_repo, [run])
    assert "stale compile evidence" in finding.what and "kernels/used.py" in finding.what


@pytest.mark.parametrize(
    ("compiled", "match"),
    [
        pytest.param(COMPILED, None, id="as-declared"),
        pytest.param(("kernels/usde.py", "kernels/tables.py"), "matches no file", id="typo"),
        pytest.param(("kernels/used.py", "docs/x.py"), "not one of the kernel files", id="outside"),
    ],
)
def test_check_reports_compile_inputs_that_are_not_kernel_files(
    tmp_path: Path, compiled: tuple[str, ...], match: str | None
) -> None:
    from tether.check import check_compiled_inputs

    root = fixture_project(tmp_path / "p", kernels=("kernels/*.py",), compiled=compiled)
    for rel in ("kernels/used.py", "kernels/tables.py", "docs/x.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("X = 1\n", encoding="utf-8")
    findings = check_compiled_inputs(root)
    found = [f.what for f in findings]
    if match is None:
        assert found == []
    else:
        assert len(found) == 1 and match in found[0] and "compiled" in found[0]
        # At the line that declares the pattern, not at the file's first line.
        lines = (root / "pyproject.toml").read_text(encoding="utf-8").splitlines()
        assert "compiled = " in lines[findings[0].line - 1], findings[0]


def test_kept_comparisons_agree_follow_the_text_and_a_damaged_entry_is_rebuilt(
    repo: Path, tmp_path: Path
) -> None:
    # KernelDiff keeps each checkout file's comparison with every commit (tether.cache,
    # kind KERNEL_DIFF), keyed by the file's text: an edit is compared again, never read
    # from the entry of the text before it; a damaged or ill-formed entry is recomputed.
    import pickle

    from tether.cache import Cache, active
    from tether.freshness import KERNEL_DIFF

    run = _run_at_head(repo)
    folder = tmp_path / "cache"
    for text, stale in ((USED, False), (USED.replace("return x", "return x + 1"), True)):
        (repo / "kernels" / "used.py").write_text(text, encoding="utf-8")
        plain = _staleness(repo, run)
        for _ in range(2):
            with active(Cache(folder)):
                assert _staleness(repo, run) == plain
        assert plain.stale is stale
    entries = [p for p in (folder / KERNEL_DIFF).iterdir() if p.is_file()]
    assert entries, "the comparisons were kept"
    for path in entries:  # damaged: the checksum no longer matches
        path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    cache = Cache(folder)
    with active(cache):
        assert _staleness(repo, run) == plain
    assert cache.misses >= 1
    # Well formed but not comparisons (a header and checksum that match): recomputed.
    for path in (folder / KERNEL_DIFF).iterdir():
        raw = path.read_bytes()
        head = b"\n".join(raw.split(b"\n")[:4]) + b"\n"
        payload = pickle.dumps({"not-a-sha": (False, None)})
        import hashlib

        path.write_bytes(head + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with active(Cache(folder)):
        assert _staleness(repo, run) == plain
