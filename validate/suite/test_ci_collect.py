"""The nightly's collect step end to end: three stand-in hosts' artifacts -> store -> docs.

FIXTURES: validate/suite/standin.py writes made-up runs for stand-in hosts: sm90 healthy,
gfx942 failed (its verify run has failures), gfx950 busy (a not_measured run); gfx1151 sends
nothing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tether.cli import main
from tether.store import load_store

from validate.suite.fixture_project import fixture_project
from validate.suite.runfactory import CONSERVATIVE_POLICY, write_conservative_policy
from validate.suite.standin import build_standin_artifacts

ROOT = Path(__file__).resolve().parents[2]
EXPECT = ("gfx942", "gfx950", "gfx1151", "sm90")


def _scratch_root(tmp_path: Path) -> Path:
    """A FIXTURE project with the real templates and an unset policy, so the real checkout is
    never touched."""
    root = fixture_project(tmp_path / "checkout", policy=CONSERVATIVE_POLICY)
    shutil.copytree(ROOT / "docs_src", root / "docs_src")
    write_conservative_policy(root)
    return root


def _collect(artifacts: Path, root: Path, store: Path, render: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--root", str(root), "--store", str(store), "collect", str(artifacts),
            "--expect", ",".join(EXPECT)]  # fmt: skip
    rc = main([*argv, *([] if render else ["--no-render"])], out, err)
    return rc, out.getvalue(), err.getvalue()


def test_stage_and_merge_make_the_union(tmp_path: Path) -> None:
    written = build_standin_artifacts(tmp_path / "artifacts")
    store = tmp_path / "results"
    rc, out, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 0, err
    runs = load_store(store)
    sent = {r.id for rs in written.values() for r in rs}
    assert sent <= {r.id for r in runs}
    by_arch = {a: [r for r in runs if r.arch == a] for a in EXPECT}
    assert all(r.status == "not_measured" for r in by_arch["gfx950"])
    assert [r.reason for r in by_arch["gfx1151"]] == [
        "the nightly job for gfx1151 sent no run files"
    ]
    assert by_arch["gfx1151"][0].guard.mode == "refused"
    failed = [r for r in by_arch["gfx942"] if r.kind == "verify"]
    assert failed and failed[0].results["failed"] == 3
    assert "gfx1151: 1 run(s): no run files arrived" in out

    # Collecting the same artifacts again adds nothing and duplicates nothing.
    before = sorted(p.name for p in store.rglob("*.json"))
    rc, _, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 0, err
    after = sorted(p.name for p in store.rglob("*.json"))
    assert [n for n in after if "verify-nightly-gfx1151" not in n] == [
        n for n in before if "verify-nightly-gfx1151" not in n
    ]


def test_a_host_file_edited_or_forged_is_refused_before_anything_is_merged(tmp_path: Path) -> None:
    from tether.store.model import digest_of

    written = build_standin_artifacts(tmp_path / "artifacts")
    original = written["sm90"][1].path
    assert original is not None
    clash = json.loads(original.read_text())
    clash["provenance"]["host"] = "an-impostor"
    clash["digest"] = digest_of(clash)  # even with a recomputed digest
    forged = tmp_path / "artifacts" / "runs-extra" / "sm90" / f"{clash['id']}.json"
    forged.parent.mkdir(parents=True)
    forged.write_text(json.dumps(clash), encoding="utf-8")
    store = tmp_path / "results"
    rc, _, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 1
    assert str(forged) in err and "content-addressed" in err
    assert not store.exists() or not list(store.rglob("*.json"))  # nothing half-merged


def test_missing_artifacts_folder_is_named(tmp_path: Path) -> None:
    rc, _, err = _collect(tmp_path / "nowhere", ROOT, tmp_path / "results", render=False)
    assert rc == 2 and "nowhere" in err


def test_collect_sh_renders_and_checks(tmp_path: Path) -> None:
    root = _scratch_root(tmp_path)
    build_standin_artifacts(tmp_path / "artifacts", root=root)
    env = dict(os.environ, TETHER_ROOT=str(root), TETHER_STORE=str(root / "results"))
    env["PY"] = sys.executable
    done = subprocess.run(
        ["bash", str(ROOT / "ci" / "collect.sh"), str(tmp_path / "artifacts"), ",".join(EXPECT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    backends = (root / "docs" / "backends.md").read_text(encoding="utf-8")
    for arch in EXPECT:
        assert arch in backends
    assert "not measured" in backends.lower()
