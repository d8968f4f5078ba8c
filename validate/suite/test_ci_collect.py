"""The nightly's collect step end to end: three stand-in hosts' artifacts -> store -> docs.

FIXTURES: ci/standin.py writes made-up runs for stand-in hosts: sm90 healthy, gfx942 failed
(its verify run has failures), gfx950 busy (a not_measured run); gfx1151 sends nothing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from tether.store import load_store

from validate.suite.runfactory import write_conservative_policy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))  # ci/ holds scripts, not a package

import collect  # noqa: E402  (after the path above)
import standin  # noqa: E402

NIGHT = datetime(2026, 11, 29, 3, 0, tzinfo=timezone.utc)
EXPECT = ("gfx942", "gfx950", "gfx1151", "sm90")


def _scratch_root(tmp_path: Path) -> Path:
    """A copy of what render and check read and write, so the real checkout is never touched."""
    root = tmp_path / "checkout"
    root.mkdir()
    # lib/ stays behind: the check scans it for hand-typed figures, which is its own test.
    for name in ("docs_src", "kernels", "docs"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, root / name)
    # The stand-in hosts' store holds none of the runs the real policy cites.
    write_conservative_policy(root)
    return root


def _collect(artifacts: Path, root: Path, store: Path, render: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = collect.collect(artifacts, root, store, EXPECT, render=render, out=out, err=err, now=NIGHT)
    return rc, out.getvalue(), err.getvalue()


def test_stage_and_merge_make_the_union(tmp_path: Path) -> None:
    written = standin.build_standin_artifacts(tmp_path / "artifacts")
    store = tmp_path / "results"
    rc, out, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 0, err
    runs = load_store(store)
    sent = {json.loads(p.read_text())["id"] for paths in written.values() for p in paths}
    assert sent <= {r.id for r in runs}
    by_arch = {a: [r for r in runs if r.arch == a] for a in EXPECT}
    assert all(r.status == "not_measured" for r in by_arch["gfx950"])
    assert [r.reason for r in by_arch["gfx1151"]] == [
        "the nightly job for gfx1151 sent no run files"
    ]
    failed = [r for r in by_arch["gfx942"] if r.kind == "verify"]
    assert failed and failed[0].results["failed"] == 3
    assert "gfx1151: no run files arrived" in out

    # Collecting the same artifacts again adds nothing and duplicates nothing.
    before = sorted(p.name for p in store.rglob("*.json"))
    rc, _, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 0, err
    after = sorted(p.name for p in store.rglob("*.json"))
    assert [n for n in after if "verify-nightly-gfx1151" not in n] == [
        n for n in before if "verify-nightly-gfx1151" not in n
    ]


def test_two_hosts_claiming_one_id_are_refused(tmp_path: Path) -> None:
    written = standin.build_standin_artifacts(tmp_path / "artifacts")
    clash = json.loads(written["sm90"][1].read_text())
    clash["provenance"]["host"] = "an-impostor"
    standin.write_run(tmp_path / "artifacts" / "runs-extra", clash)
    store = tmp_path / "results"
    rc, _, err = _collect(tmp_path / "artifacts", ROOT, store, render=False)
    assert rc == 1
    assert clash["id"] in err and "different content" in err
    assert not store.exists() or not list(store.rglob("*.json"))  # nothing half-merged


def test_store_merge_refuses_a_conflicting_id_already_in_the_store(tmp_path: Path) -> None:
    written = standin.build_standin_artifacts(tmp_path / "artifacts")
    store = tmp_path / "results"
    assert _collect(tmp_path / "artifacts", ROOT, store, render=False)[0] == 0
    kept = {p: p.read_bytes() for p in store.rglob("*.json")}
    # FIXTURE: next night a host re-uploads a changed file under an id the store already has.
    later = tmp_path / "later"
    clash = json.loads(written["sm90"][0].read_text())
    clash["results"]["passed"] = 9
    standin.write_run(later / "runs-sm90", clash)
    rc, _, err = _collect(later, ROOT, store, render=False)
    assert rc == 1, err
    assert {p: p.read_bytes() for p in store.rglob("*.json")} == kept  # nothing lost or changed


def test_missing_artifacts_folder_is_named(tmp_path: Path) -> None:
    rc, _, err = _collect(tmp_path / "nowhere", ROOT, tmp_path / "results", render=False)
    assert rc == 1 and "nowhere" in err


def test_collect_sh_renders_and_checks(tmp_path: Path) -> None:
    root = _scratch_root(tmp_path)
    standin.build_standin_artifacts(tmp_path / "artifacts")
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
