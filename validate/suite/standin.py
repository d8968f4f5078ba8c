"""FIXTURE stand-in hosts: run files shaped like what a nightly host job uploads.

FIXTURES ONLY. Nothing here was measured; every run comes from validate/suite/runfactory.py
(made-up samples) so the nightly's collect, merge and render steps can be exercised without
hardware. Never copy these files into results/.
"""

from __future__ import annotations

from pathlib import Path

from tether.store import Run, write_run

from validate.suite.runfactory import make_not_measured_run, make_sweep_run, make_verify_run

AXES = {"hq": [8, 16], "seqlen": [128, 256]}


def build_standin_artifacts(out: Path, root: Path | None = None) -> dict[str, list[Run]]:
    """Three stand-in hosts as downloaded artifacts, ``out/runs-<arch>/<arch>/<id>.json``.

    sm90 is healthy (passing verify and a sweep); gfx942 failed (its verify run has
    failures); gfx950 was busy (the guard recorded a not_measured run). gfx1151 sends nothing.
    """
    kw = {"root": root} if root is not None else {}
    written: dict[str, list[Run]] = {
        "sm90": [
            make_verify_run(arch="sm90", vendor="cuda", **kw),
            make_sweep_run(arch="sm90", axes=AXES, ratio=0.9, **kw),
        ],
        "gfx942": [
            make_verify_run(arch="gfx942", vendor="rocm", passed=7, failed=3, **kw),
            make_sweep_run(arch="gfx942", axes=AXES, ratio=1.1, **kw),
        ],
        "gfx950": [
            make_not_measured_run(
                kind="verify",
                name="validate",
                arch="gfx950",
                reason="host busy: lock held by another job",
                **kw,
            )
        ],
    }
    for arch, runs in written.items():
        for i, run in enumerate(runs):
            runs[i] = run.with_path(write_run(run, out / f"runs-{arch}"))
    return written
