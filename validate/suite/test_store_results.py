"""Typed run summaries (issue 23 item 4): one definition per shape, built with ``from_json``.

The schema's per-kind ``results`` table is derived from tether.store.results; these tests
pin that derivation and the records' round trip on FIXTURE runs from runfactory.
"""

from __future__ import annotations

import pytest
from tether.errors import RunFileError
from tether.store import schema
from tether.store.results import BY_KIND, GateResults, VerifyResults

from validate.suite.runfactory import make_gate_run, make_verify_run


def test_the_schema_table_is_the_records_fields() -> None:
    for kind, summary in BY_KIND.items():
        assert schema.RESULTS[kind] == summary.required()
        assert schema.OPTIONAL_RESULTS.get(kind, {}) == summary.optional()
    assert schema.RESULTS["sweep"] == schema.RESULTS["tune"] == {}


def test_a_verify_runs_results_round_trip() -> None:
    run = make_verify_run()
    typed = VerifyResults.from_json(run.results, "<fixture>")
    assert typed.passed == run.results["passed"] and typed.vendor == run.results["vendor"]
    assert typed.to_json() == dict(run.results)


def test_a_gate_runs_results_round_trip() -> None:
    run = make_gate_run()
    typed = GateResults.from_json(run.results, "<fixture>")
    assert typed.to_json() == dict(run.results)


def test_from_json_names_the_field() -> None:
    good = dict(make_verify_run().results)
    with pytest.raises(RunFileError, match=r"results\.passed: expected int, got str"):
        VerifyResults.from_json({**good, "passed": "3"}, "<fixture>")
    missing = {k: v for k, v in good.items() if k != "suite"}
    with pytest.raises(RunFileError, match=r"results\.suite: missing"):
        VerifyResults.from_json(missing, "<fixture>")
    with pytest.raises(RunFileError, match=r"results\.complete: expected bool"):
        VerifyResults.from_json({**good, "complete": 1}, "<fixture>")
