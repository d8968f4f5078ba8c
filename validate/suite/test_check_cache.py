"""The check's cache (issue 46 item 1) never changes what the check says.

Each test builds a FIXTURE project (as test_check_commit does), warms the cache under
``.git/tether/cache`` with one check, then changes the commit or damages the cache and asserts
that the cached check says exactly what ``--no-cache`` says.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from validate.suite.fixture_project import fixture_project, git, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed: the check judges the git index")
    root = fixture_project(tmp_path / "repo")
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    make_sweep_run(started="2026-01-01T00:00:00Z", ratio=0.9, store=root / "results", root=root)
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "FIXTURE: rendered")
    rc, out, err = run_cli(root, "check")  # warms the cache
    assert rc == 0, f"FIXTURE repository is not clean:\n{out}{err}"
    return root


def _cache_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / ".git" / "tether" / "cache").rglob("*") if p.is_file())


def _same_as_uncached(root: Path) -> tuple[int, str]:
    cached = run_cli(root, "check")
    plain = run_cli(root, "check", "--no-cache")
    assert cached[:2] == plain[:2], f"cached:\n{cached[1]}\nuncached:\n{plain[1]}"
    return cached[0], cached[1]


def test_a_warm_check_writes_entries_and_agrees(repo: Path) -> None:
    assert _cache_files(repo), "the first check kept nothing under .git/tether/cache"
    rc, _ = _same_as_uncached(repo)
    assert rc == 0


def test_docs_citing_an_untracked_run_fail_with_a_warm_cache(repo: Path) -> None:
    make_sweep_run(
        started="2026-01-05T00:00:00Z", ratio=0.7, seed=3, store=repo / "results", root=repo
    )
    rc, out, err = run_cli(repo, "render")
    assert rc == 0, out + err
    git(repo, "add", "README.md", "docs")  # the docs, not the run they now cite
    rc, out = _same_as_uncached(repo)
    assert rc == 1 and "README.md" in out, out


def test_a_hand_edited_rendered_doc_fails_with_a_warm_cache(repo: Path) -> None:
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nfaster by 9.99x\n", "utf-8")
    git(repo, "add", "README.md")
    rc, out = _same_as_uncached(repo)
    assert rc == 1, out


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip"])
def test_damaged_entries_are_rebuilt_not_believed(repo: Path, damage: str) -> None:
    for entry in _cache_files(repo):
        data = entry.read_bytes()
        if damage == "truncate":
            entry.write_bytes(data[: len(data) // 2])
        elif damage == "garbage":
            entry.write_bytes(b"not a cache entry\n")
        else:
            entry.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    rc, _ = _same_as_uncached(repo)
    assert rc == 0
    # And a real fault is still found through the rebuilt entries.
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nfaster by 9.99x\n", "utf-8")
    git(repo, "add", "README.md")
    rc, out = _same_as_uncached(repo)
    assert rc == 1, out


def test_kept_source_digests_are_read_back_and_damage_is_recomputed(tmp_path: Path) -> None:
    # The kernel sources' digests a check keeps (tether.cache.active): the second process reads
    # them back, and a damaged or wrong-typed entry is recomputed, never believed.
    from tether.cache import Cache, active
    from tether.store import provenance

    code = "def f(x):\n    '''doc'''\n    return x + 1  # note\n"
    broken = "def f(:\n"
    plain = provenance._source_digest(code)
    folder = tmp_path / "cache"
    cache = Cache(folder)
    provenance.source_digest.cache_clear()
    with active(cache):
        assert provenance.source_digest(code) == plain
        assert provenance.definition_digests(broken) is None
    entries = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(entries) == 2, entries
    provenance.source_digest.cache_clear()
    with active(cache):
        assert provenance.source_digest(code) == plain
        assert provenance.definition_digests(broken) is None
    assert cache.hits == 2
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-3] + b"bad")
    key = __import__("hashlib").sha256(code.encode()).hexdigest()
    provenance.source_digest.cache_clear()
    with active(cache):
        assert provenance.source_digest(code) == plain  # damaged: recomputed
        cache.put("source-digest", key, (123,))  # whole, but not a digest
        provenance.source_digest.cache_clear()
        assert provenance.source_digest(code) == plain
        assert provenance.definition_digests(broken) is None
    provenance.source_digest.cache_clear()


_OPENED: list[str] | None = None


def _record_opens(event: str, args: tuple[object, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | Path):
        _OPENED.append(str(args[0]))


def test_the_evidence_judgement_opens_no_prose_file(repo: Path) -> None:
    # The cached verdict leaves the prose files' blob ids out of its key (prose_files), so the
    # judgement must never read one: every file it opens is recorded by an audit hook.
    global _OPENED
    import sys

    from tether import project
    from tether.check import judge_evidence
    from tether.checkcache import prose_files
    from tether.gitobjects import listing

    (repo / "NOTES.md").write_text("Hand-written notes.\n", encoding="utf-8")
    (repo / "docs" / "howto.md").write_text("How to adopt.\n", encoding="utf-8")
    git(repo, "add", "-A")
    files = listing(repo, None)
    prose = prose_files(project.get(repo), files, "")
    assert {"NOTES.md", "docs/howto.md"} <= prose, prose
    assert "README.md" not in prose  # rendered: the judgement reads it
    sys.addaudithook(_record_opens)  # hooks cannot be removed; _OPENED switches it
    _OPENED = []
    try:
        judge_evidence(repo, repo / "results", False, "in the index")
        opened = {Path(p).resolve() for p in _OPENED}
    finally:
        _OPENED = None
    assert any(p.name == "README.md" for p in opened), "the hook saw no rendered target"
    read_prose = sorted(p for p in prose if (repo / p).resolve() in opened)
    assert not read_prose, f"the evidence judgement read prose files: {read_prose}"


def test_kept_cell_stats_follow_the_runs_content(tmp_path: Path) -> None:
    # Statistics are kept by the content digests of the run and its siblings: a copy with one
    # sample edited (another object, another digest) is judged afresh, and a damaged entry is
    # recomputed.
    import dataclasses

    from tether.cache import Cache, active
    from tether.stats import _cell_stats, cell_stats

    run = make_sweep_run(ratio=0.9)
    cell = run.cells[0]
    slower = tuple(v * 3 for v in cell.samples["B"])
    edited = dataclasses.replace(
        run, cells=(dataclasses.replace(cell, samples={**cell.samples, "B": slower}),)
    )
    cache = Cache(tmp_path / "cache")
    with active(cache):
        kept = cell_stats(run)
        other = cell_stats(edited)
    assert kept == _cell_stats(run) and other == _cell_stats(edited) and kept != other
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(entries) == 2
    for entry in entries:
        entry.write_bytes(b"garbage")
    fresh_copy = dataclasses.replace(run, path=None)  # a new object: not the in-process memo
    with active(cache):
        assert cell_stats(fresh_copy) == _cell_stats(run)


def test_placed_refuses_to_change_content() -> None:
    from tether.store.model import placed

    run = make_sweep_run()
    assert placed(run, added=3).added == 3
    with pytest.raises(ValueError, match="cells"):
        placed(run, cells=())


def _tamper_a_sample(path: Path) -> None:
    """FIXTURE: one raw sample of the run file at ``path`` edited, its digest left as it was
    (what a hand edit of a number does)."""
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    data["cells"][0]["samples"]["B"][0] *= 0.5
    path.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n", encoding="utf-8")


def _second_run(repo: Path) -> None:
    make_sweep_run(
        started="2026-01-02T00:00:00Z", ratio=0.8, seed=5, store=repo / "results", root=repo
    )
    rc, out, err = run_cli(repo, "render")
    assert rc == 0, out + err
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: a second run")
    rc, out = _same_as_uncached(repo)  # warms the cache with both runs
    assert rc == 0, out


def _run_files(repo: Path) -> list[Path]:
    return sorted((repo / "results").rglob("*.json"))


def _found_then_restored(repo: Path, victim: Path) -> None:
    """Tamper one sample of ``victim``: the check (as with --no-cache) names it malformed;
    with the file checked out again it is the genuine blob, and the check passes."""
    _tamper_a_sample(victim)
    git(repo, "add", "-A")
    rc, out = _same_as_uncached(repo)
    assert rc == 1 and victim.name in out and "malformed run" in out, out
    git(repo, "checkout", "HEAD", "--", "results")
    git(repo, "add", "-A")
    rc, out = _same_as_uncached(repo)
    assert rc == 0, out


def test_a_run_tampered_after_caching_is_found(repo: Path) -> None:
    # The run's entry is warm; the edited file is another blob, so it is parsed, and its
    # digest no longer matches its content.
    _second_run(repo)
    for victim in _run_files(repo):
        _found_then_restored(repo, victim)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "swap", "other-tool"])
def test_a_damaged_cache_never_hides_a_tampered_run(repo: Path, damage: str) -> None:
    # Every entry is damaged one way, then a run file is tampered: the check finds it with
    # the damaged cache exactly as it does with none, and the damage is rebuilt, not read.
    import os

    from tether import cache as tcache

    _second_run(repo)
    entries = _cache_files(repo)
    assert entries
    if damage == "swap":
        # Each entry's bytes moved to another entry's file of the same kind: every header
        # then names another key.
        by_kind: dict[Path, list[Path]] = {}
        for entry in entries:
            by_kind.setdefault(entry.parent.parent, []).append(entry)
        swapped = 0
        for group in by_kind.values():
            datas = [p.read_bytes() for p in group]
            for path, data in zip(group, datas[1:] + datas[:1], strict=True):
                path.write_bytes(data)
                swapped += len(group) > 1
        assert swapped, "no kind held two entries to swap"
    elif damage == "other-tool":
        # The same entries as another tool version writes them: its digest in the header.
        real = tcache.tool_digest()
        for entry in entries:
            data = entry.read_bytes()
            assert real.encode() in data
            entry.write_bytes(data.replace(real.encode(), b"0" * len(real), 1))
    else:
        for entry in entries:
            data = entry.read_bytes()
            if damage == "truncate":
                entry.write_bytes(data[: len(data) // 2])
            elif damage == "garbage":
                entry.write_bytes(os.urandom(len(data)))
            else:  # one byte of the payload changed, the checksum left as it was
                entry.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    victim = _run_files(repo)[-1]
    _found_then_restored(repo, victim)


def test_a_kept_run_entry_of_another_run_is_not_read(repo: Path) -> None:
    # An entry whose file sits under another run's key (a run's verdict copied over
    # another's) is refused by its header; the check agrees with --no-cache.
    from tether.cache import FORMAT, digest, tool_digest

    _second_run(repo)
    runs = sorted((repo / ".git" / "tether" / "cache" / "run").rglob("*"))
    runs = [p for p in runs if p.is_file()]
    assert len(runs) == 2, runs
    first, second = (p.read_bytes() for p in runs)
    runs[0].write_bytes(second)
    runs[1].write_bytes(first)
    assert digest(FORMAT, tool_digest(), "run", "x")  # the names are keyed as the cache keys
    victim = _run_files(repo)[0]
    _tamper_a_sample(victim)
    git(repo, "add", "-A")
    rc, out = _same_as_uncached(repo)
    assert rc == 1 and victim.name in out, out


def test_packed_samples_are_the_runs_samples() -> None:
    # A kept run holds its samples packed (tether.checkcache.PackedSamples): equal to the
    # file's, the same JSON and the same digest; a value that is not a float is not packed.
    import pickle

    from tether.checkcache import PackedSamples, _packed
    from tether.store.model import digest_of

    run = make_sweep_run(ratio=0.9)
    packed = pickle.loads(pickle.dumps(_packed(run)))
    assert all(isinstance(c.samples, PackedSamples) for c in packed.cells)
    assert packed == run and run == packed
    assert packed.to_json() == run.to_json()
    assert digest_of(packed.body()) == run.digest
    cell = run.cells[0]
    assert dict(packed.cells[0].samples) == dict(cell.samples)
    assert packed.cells[0].samples["B"] == cell.samples["B"]
    assert PackedSamples.of({"A": (1, 2.0)}) == {"A": (1, 2.0)}
    assert not isinstance(PackedSamples.of({"A": (1, 2.0)}), PackedSamples)
    with pytest.raises(KeyError):
        packed.cells[0].samples["nope"]


@pytest.mark.parametrize("odd", ["signature-alone", "misnamed", "packed-twin"])
def test_a_store_problem_is_found_while_the_runs_are_held(repo: Path, odd: str) -> None:
    # A warm check writes no run the cache knows into its snapshot and lists the store as git
    # does (tether.store.layout.scan_listed); a file beside the held runs is still judged as
    # the walk of a full copy judges it.
    _second_run(repo)
    victim = _run_files(repo)[0]
    if odd == "signature-alone":
        extra = victim.with_name("20260109T000000Z-sweep-x-sm90-0123456789ab.sig")
    elif odd == "misnamed":
        extra = victim.with_name("notes.txt")
    else:
        extra = victim.with_name(victim.name + ".gz")
    extra.write_bytes(b"not what it claims\n")
    git(repo, "add", "-A")
    # A twin's message names the other file by its path in the snapshot, a temp folder of
    # its own each check; the rest of every line is compared.
    cached, plain = run_cli(repo, "check"), run_cli(repo, "check", "--no-cache")
    unplaced = [re.sub(r"/\S*/tether-check-[^/]+/tree/", "", said[1]) for said in (cached, plain)]
    assert cached[0] == plain[0] == 1 and unplaced[0] == unplaced[1], unplaced
    assert extra.name in cached[1], cached[1]


def test_kept_trends_follow_the_runs_content(tmp_path: Path) -> None:
    # The trends are kept by the content digests of the runs (tether.render.context._trends):
    # an edited replicate is another key, and a damaged entry is computed again.
    import dataclasses

    from tether.cache import Cache, active
    from tether.render.context import _trends
    from tether.trends import trend_context

    runs = [
        make_sweep_run(started=f"2026-01-0{day}T00:00:00Z", ratio=ratio, seed=day)
        for day, ratio in ((1, 0.9), (2, 0.5), (3, 0.91))
    ]
    cell = runs[1].cells[0]
    faster = tuple(v * 0.2 for v in cell.samples["B"])
    edited = [
        runs[0],
        dataclasses.replace(
            runs[1], cells=(dataclasses.replace(cell, samples={**cell.samples, "B": faster}),)
        ),
        runs[2],
    ]
    cache = Cache(tmp_path / "cache")
    with active(cache):
        kept, other = _trends(runs), _trends(edited)
        assert _trends(runs) == kept and cache.hits >= 1
    assert kept == trend_context(runs) and other == trend_context(edited) and kept != other
    entries = [p for p in (tmp_path / "cache" / "trends").rglob("*") if p.is_file()]
    assert len(entries) == 2
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-2] + b"xx")
    with active(cache):
        assert _trends(runs) == trend_context(runs)


def test_the_check_command_exits_at_once_with_its_whole_output(repo: Path, tmp_path: Path) -> None:
    # `python -m tether check` ends with os._exit once its output is flushed
    # (tether.cli.HARD_EXIT_VERBS): every line is still written, the code is the check's, and
    # its temp copy of the tree is gone.
    import os
    import subprocess
    import sys

    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nfaster by 9.99x\n", "utf-8")
    git(repo, "add", "README.md")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TMPDIR"] = str(temp)
    done = subprocess.run(
        [sys.executable, "-m", "tether", "check"], cwd=repo, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    rc, out, err = run_cli(repo, "check")
    assert (done.returncode, done.stdout) == (rc, out) and rc == 1, done.stdout + done.stderr
    assert done.stderr.endswith(err) and "tether check: " in err, done.stderr
    assert not list(temp.iterdir()), "the check left its temp copy behind"


def test_entries_put_are_read_back_before_and_after_they_are_written(tmp_path: Path) -> None:
    # Cache.put hands the write to a thread (tether.cache): an entry is read back from memory
    # until it is written, from its file after flush, and one kind's entries share a folder.
    from tether.cache import Cache

    cache = Cache(tmp_path / "cache")
    for n in range(40):
        cache.put("kind", f"key-{n}", ("value", n))
        assert cache.get("kind", f"key-{n}", tuple) == ("value", n)
    cache.flush()
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(files) == 40 and {p.parent.name for p in files} == {"kind"}
    again = Cache(tmp_path / "cache")
    assert [again.get("kind", f"key-{n}", tuple) for n in range(40)] == [
        ("value", n) for n in range(40)
    ]
    assert again.get("kind", "key-0", list) is None  # the wrong type: refused and removed
    assert again.get("kind", "key-0", tuple) is None


def test_a_profiled_check_still_writes_its_profile(repo: Path, tmp_path: Path) -> None:
    # Under a profiler the check exits as usual (tether.cli.run), so the profile is written.
    import os
    import subprocess
    import sys

    out = tmp_path / "check.prof"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "tether", "check"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.parametrize("bound", [True, False], ids=["valid-before", "control"])
def test_a_clock_bound_allowed_signers_file_keeps_no_judgement(repo: Path, bound: bool) -> None:
    # Under an allowed-signers file with a validity interval, ssh-keygen's verdicts read the
    # clock (tether.store.signing.time_bound), so neither they nor the judgement resting on
    # them are kept (the control, without one, keeps the judgement); the check still says
    # what --no-cache says.
    from validate.suite.signing_keys import keypair, require_ssh_keygen

    require_ssh_keygen()
    key = keypair(repo.parent, "host")
    public = " ".join(key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2])
    interval = ',valid-before="29991231"' if bound else ""
    (repo / ".tether").mkdir(exist_ok=True)
    (repo / ".tether" / "allowed_signers").write_text(
        f'host@fixture namespaces="tether-run"{interval} {public}\n', "utf-8"
    )
    config = repo / "pyproject.toml"
    text = config.read_text(encoding="utf-8").split("[tool.tether.signing]")[0]
    config.write_text(
        text + '[tool.tether.signing]\nallowed_signers = ".tether/allowed_signers"\n'
        "require = true\n",
        encoding="utf-8",
    )
    git(repo, "add", "-A")
    shutil.rmtree(repo / ".git" / "tether" / "cache")
    rc, out = _same_as_uncached(repo)
    assert rc == 1 and "not recorded as legacy" in out, out
    kept = {p.parent.name for p in _cache_files(repo)}
    assert ("evidence" not in kept) == bound, kept


def test_cited_ids_finds_every_id_the_text_holds() -> None:
    # check.cited_ids looks an id up where its stamp begins; it must name exactly the runs
    # whose id is a substring of the text, as a search per run does.
    import dataclasses

    from tether.check import cited_ids

    base = make_sweep_run()
    ids = [
        "20260101T000000Z-sweep-a-sm90-0123456789ab",
        "20260101T000000Z-sweep-a-sm90-0123456789",  # a prefix of the first
        "20260101T000000Z-sweep-b-sm90-0123456789ab",
        "20260102T000000Z-sweep-a-sm90-0123456789ab",
        "20260103T000000Z-sweep-c-sm90-ffffffffffff",
        "legacy-run-without-a-stamp",
        "0260101T000000Z-sweep-a-sm90-0123456789ab",  # a suffix of the first, no stamp
    ]
    runs = [dataclasses.replace(base, id=i) for i in ids]
    text = (
        b"cites 20260101T000000Z-sweep-a-sm90-0123456789abX and "
        b"x20260102T000000Z-sweep-a-sm90-0123456789ab, legacy-run-without-a-stamp; "
        b"220260103T000000Z-sweep-c-sm90-fffffffffff (one digit short)"
    )
    published = {Path("README.md"): text, Path("docs/f.svg"): ids[4].encode()}
    want = [r for r in runs if r.id.encode() in text]
    assert cited_ids(runs, published) == want
    assert [r.id for r in want] == [ids[0], ids[1], ids[3], ids[5], ids[6]]
