"""The results store: one immutable, validated JSON file per run (schema ``tether.run/1``).

See SCHEMA.md beside this file for the contract. Importing this package never imports torch.
"""

from __future__ import annotations

from tether.store.io import is_superseded, latest, load_run, load_store, write_run
from tether.store.merge import MergeReport, merge
from tether.store.model import ARCHES, KINDS, SCHEMA, STATUSES, Cell, Run
from tether.store.provenance import harness_fingerprint, kernels_fingerprint, new_run
from tether.store.safe import check_safe_text
from tether.store.schema import run_from_json, validate_run

__all__ = [
    "ARCHES",
    "KINDS",
    "SCHEMA",
    "STATUSES",
    "Cell",
    "MergeReport",
    "Run",
    "check_safe_text",
    "harness_fingerprint",
    "is_superseded",
    "kernels_fingerprint",
    "latest",
    "load_run",
    "load_store",
    "merge",
    "new_run",
    "run_from_json",
    "validate_run",
    "write_run",
]
