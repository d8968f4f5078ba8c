"""The install takes the Triton the sm90 Gluon arm is written for (issue 45 item 3).

The arm refuses every Triton outside ``GLUON_TRITON`` (kernels/tether_kernels/gluon/launch.py,
the releases of gluon/releases.toml), and a refused arm routes sm90 calls to the next arm with no
error. So the ``kernels`` extra must bound Triton to exactly those releases: a pin that drifts from the constant (either way) is
an install where the arm is refused with no error, or one that forbids the release the arm needs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from tether_kernels.gluon.launch import GLUON_TRITON

ROOT = Path(__file__).resolve().parents[2]


def _triton_requirement() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [r for r in project["optional-dependencies"]["kernels"] if re.match(r"triton\b", r)]
    assert len(reqs) == 1, f"the kernels extra should name triton once: {reqs}"
    return reqs[0]


def _bounds(req: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(lower, upper) of a ``triton>=A.B,<C.D`` requirement; anything else fails the test."""
    m = re.fullmatch(r"triton\s*>=\s*(\d+)\.(\d+)\s*,\s*<\s*(\d+)\.(\d+)", req.strip())
    assert m, f"the kernels extra's {req!r} is not a bounded range triton>=A.B,<C.D"
    a, b, c, d = (int(g) for g in m.groups())
    return (a, b), (c, d)


def test_kernels_extra_bounds_triton_to_the_gluon_release() -> None:
    first, last = ((int(p) for p in r.split(".")) for r in (GLUON_TRITON[0], GLUON_TRITON[-1]))
    (lo_major, lo_minor), (hi_major, hi_minor) = tuple(first), tuple(last)
    lower, upper = _bounds(_triton_requirement())
    assert lower == (lo_major, lo_minor), f"lower bound {lower} is not the arm's first release"
    assert upper == (hi_major, hi_minor + 1), f"upper bound {upper} is not past its last release"


def test_bounds_parser_refuses_an_unbounded_pin() -> None:
    # The check above can fail: an open-ended pin (the one that let pip install 3.9) is refused.
    with pytest.raises(AssertionError, match="not a bounded range"):
        _bounds("triton>=3.2")


def test_kernels_extra_keeps_numpy_below_what_the_interpreter_breaks_on() -> None:
    # Triton 3.6's interpreter (the CPU suite's TRITON_INTERPRET=1) fails on numpy 2.4 ("only
    # 0-dimensional arrays can be converted to Python scalars", 499 tests at 18e14d0), and the
    # interpreter needs numpy at all, which nothing else in the extra pulls in.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [r for r in project["optional-dependencies"]["kernels"] if re.match(r"numpy\b", r)]
    assert reqs and "<2.4" in reqs[0].replace(" ", ""), reqs
