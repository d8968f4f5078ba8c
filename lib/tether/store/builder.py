"""The one builder of runs: a new run's provenance, harness fingerprint, id and validation.

Sweeps, gates, probes, tuning, compile and verify runs all come from ``new_run``. It sits
above both modules it builds on: tether.store.provenance (git state, host, versions,
fingerprints, the id) and tether.store.harness (what gives a run's samples their meaning,
which builds on provenance's fingerprint helpers).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tether.arch import check_arch
from tether.atomic import utc_stamp
from tether.store.harness import recorded_value
from tether.store.model import Cell, GuardRecord, Provenance, Run
from tether.store.provenance import (
    BENCH_DIR,
    default_root,
    git_state,
    kernels_fingerprint,
    make_id,
    measured_harness_fingerprint,
    run_environment,
    runtime_versions,
)
from tether.store.schema import validate_run


def new_run(
    kind: str,
    name: str,
    *,
    arch: str,
    device: str,
    config: Mapping[str, Any],
    guard: GuardRecord,
    status: str = "ok",
    reason: str | None = None,
    cells: Iterable[Cell] = (),
    results: Mapping[str, Any] | None = None,
    started: datetime | str | None = None,
    ended: datetime | str | None = None,
    root: Path | None = None,
    runtime: Mapping[str, str | None] | None = None,
    driver: str | None = None,
    host: str | None = None,
) -> Run:
    """A validated new run with full provenance and its content-addressed id.

    The one builder of runs: sweeps, gates, probes, tuning, compile and verify runs all come
    from here. Its harness fingerprint covers what the kind depends on (see
    tether.store.harness: a timing run its engine, case model and arm adapters, a verify run
    the engine, a compile run nothing of the harness). ``guard`` is required: how the run held the host is never left out (an
    unguarded run says so, and why). ``runtime`` carries what only the caller knows (cuda,
    hip, cudnn versions). Raises UnknownArchError for a bad arch name, RunFileError for any
    other bad field.
    """

    check_arch(arch)
    base = (root or default_root()).resolve()
    start = utc_stamp(started)
    end = utc_stamp(ended) if ended is not None else (start if started is not None else utc_stamp())
    sha, dirty = git_state(base)
    # The installed engine is the code that measures, as for the whole-file fingerprint.
    harness = recorded_value(kind, name, config, base, BENCH_DIR)
    provenance = Provenance(
        git_sha=sha,
        git_dirty=dirty,
        harness_fingerprint=harness if harness is not None else measured_harness_fingerprint(base),
        kernels_fingerprint=kernels_fingerprint(base),
        host=host if host is not None else (socket.gethostname() or os.uname().nodename),
        arch=arch,
        device=device,
        driver=driver,
        runtime=runtime_versions(runtime),
        started=start,
        ended=end,
        environment=run_environment(),
    )
    draft = Run(
        id="draft",
        kind=kind,
        name=name,
        status=status,
        reason=reason,
        provenance=provenance,
        guard=guard,
        config=dict(config),
        cells=tuple(cells),
        results=dict(results or {}),
    )
    try:
        digest = draft.digest
    except (TypeError, ValueError):
        digest = "sha256:" + "0" * 64  # not JSON data: validation below names the field
    run = draft.__class__(**{**draft.__dict__, "id": make_id(kind, name, arch, start, digest)})
    validate_run(run, source="<new_run>")
    return run


__all__ = ["new_run"]
