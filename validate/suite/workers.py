"""The two ways a FIXTURE suite is run by tests of what tether's pytest plugin gathers over a
session: in one process, and under pytest-xdist (where each report reaches the plugin in a
worker and again in the controller, and the controller merges the workers' output)."""

from __future__ import annotations

import importlib.util

import pytest

ONE_PROCESS_AND_XDIST = [
    pytest.param((), id="one-process"),
    pytest.param(
        ("-n", "2"),
        id="xdist-2",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed"
        ),
    ),
]
