"""Merge the nightly's per-host artifacts into a store: stage, record absent hosts, merge.

Input: a folder of downloaded artifacts, one subfolder per host job (``runs-<arch>/``), each
holding that host's run files at any depth. Every run file found is validated and staged at
``<staging>/<arch>/<id>.json``, then merged into the store (a union; ids are content-addressed,
so two hosts cannot upload different runs under one id). An expected arch whose job sent no
run file at all (runner offline, artifact lost) gets a ``not_measured`` verify run saying so,
built by the one run builder, so the docs show "not measured" with a reason instead of
silently showing an older section as if it were tonight's.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from tether.atomic import utc_stamp
from tether.errors import RunFileError, UsageError
from tether.store.io import load_run, write_run
from tether.store.merge import MergeReport, merge
from tether.store.model import SCHEMA, GuardRecord, Run
from tether.store.signing import sidecar


def find_runs(host_dir: Path) -> list[Path]:
    """Run files below ``host_dir`` (JSON objects of the run schema), sorted."""
    found = []
    for path in sorted(host_dir.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunFileError(path, "json", f"not readable JSON: {exc}") from exc
        if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("tether.run/"):
            found.append(path)
    return found


def stage(artifacts: Path, staging: Path) -> dict[str, list[str]]:
    """Validate and copy every host's run files into ``staging/<arch>/<id>.json``."""
    if not artifacts.is_dir():
        raise UsageError(f"{artifacts}: artifacts folder does not exist")
    by_arch: dict[str, list[str]] = {}
    for host_dir in sorted(p for p in artifacts.iterdir() if p.is_dir()):
        for path in find_runs(host_dir):
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") != SCHEMA:
                raise RunFileError(
                    path, "schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}"
                )
            run = Run.from_json(data, path)
            dest = staging / run.arch / f"{run.id}.json"
            if dest.exists():
                continue  # the same content from two hosts: one run (ids are content-addressed)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            if (sig := sidecar(path)).is_file():  # the measuring host's signature travels too
                shutil.copyfile(sig, sidecar(dest))
            load_run(dest)  # the staged copy loads with its folder and name
            by_arch.setdefault(run.arch, []).append(run.id)
    return by_arch


def missing_host_run(arch: str, root: Path, now: datetime) -> Run:
    """A not_measured verify run for an arch whose nightly job sent nothing."""
    stamp = utc_stamp(now)
    reason = f"the nightly job for {arch} sent no run files"
    return Run.new(
        "verify", "nightly", arch=arch, device="unknown", config={}, status="not_measured",
        reason=reason, guard=GuardRecord(mode="refused", reason=reason), started=stamp,
        root=root, host="nightly-collect",
    )  # fmt: skip


def collect(
    artifacts: Path,
    root: Path,
    store: Path,
    staging: Path,
    expect: Sequence[str] = (),
    now: datetime | None = None,
) -> tuple[dict[str, list[str]], list[str], MergeReport]:
    """Stage the artifacts, record absent hosts, merge into ``store``; nothing is written to
    ``store`` unless every file is valid. Returns (run ids by arch, arches that sent nothing,
    the merge report)."""
    by_arch = stage(artifacts, staging)
    missing = []
    for arch in expect:
        if arch not in by_arch:
            run = missing_host_run(arch, root, now or datetime.now(timezone.utc))
            write_run(run, staging)
            by_arch[arch] = [run.id]
            missing.append(arch)
    return by_arch, missing, merge([staging], store)
