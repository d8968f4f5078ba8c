"""The results store: one immutable, validated JSON file per run (schema ``tether.run/2``).

See SCHEMA.md beside this file for the contract. Importing this package never imports torch.
"""

from __future__ import annotations

from tether.store import model as _model
from tether.store.builder import new_run
from tether.store.harness import CurrentHarness, is_superseded
from tether.store.io import load_run, load_store, write_run
from tether.store.merge import MergeReport, merge
from tether.store.model import (
    GUARD_MODES,
    KINDS,
    SCHEMA,
    STATUSES,
    UNGUARDED,
    Cell,
    GuardRecord,
    Provenance,
    Run,
)
from tether.store.provenance import harness_fingerprint, kernels_fingerprint
from tether.store.safe import check_safe_text
from tether.store.schema import run_from_json, validate_run

# Run.new / from_json / load / validate / write dispatch here (see tether.store.model).
_model.LIFECYCLE.update(
    {
        "new": new_run,
        "from_json": run_from_json,
        "load": load_run,
        "validate": validate_run,
        "write": write_run,
    }
)

__all__ = [
    "GUARD_MODES",
    "KINDS",
    "SCHEMA",
    "STATUSES",
    "UNGUARDED",
    "Cell",
    "CurrentHarness",
    "GuardRecord",
    "MergeReport",
    "Provenance",
    "Run",
    "check_safe_text",
    "harness_fingerprint",
    "is_superseded",
    "kernels_fingerprint",
    "load_run",
    "load_store",
    "merge",
    "new_run",
    "run_from_json",
    "validate_run",
    "write_run",
]
