"""The policy-file reader (tether.render.policy_file): a project's POLICY, GATES, COMPILE_GATES
and TUNED by name, and which module it reads them from.

A copy of a policy file whose code equals an imported module's is read from that module, so a
test that patches the module's values sees them in a FIXTURE checkout. A copy the reader loaded
earlier by path (no import had happened yet) must never stand in for it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from tether.render.policy_file import EMPTY, PolicyData, policy, policy_module_data
from tether_kernels import gates

from validate.suite.fixture_project import fixture_project

REPO = Path(__file__).resolve().parents[2]
GATES_FILE = REPO / "kernels" / "tether_kernels" / "gates.py"


def _project(root: Path, name: str = "gates.py") -> Path:
    fixture_project(root, policy=[f"kernels/{name}"])
    (root / "kernels").mkdir()
    shutil.copy2(GATES_FILE, root / "kernels" / name)
    return root


def test_the_parts_are_named_and_an_undeclared_policy_is_empty(tmp_path: Path) -> None:
    found = policy_module_data(_project(tmp_path / "repo"))
    assert isinstance(found, PolicyData)
    assert found.gates == gates.GATES and found.compile_gates == gates.COMPILE_GATES
    assert found.policy == () and found.tuned == ()
    assert policy(tmp_path / "repo") == ((), gates.GATES)
    fixture_project(tmp_path / "none")
    assert policy_module_data(tmp_path / "none") is None
    assert PolicyData((), (), (), ()) == EMPTY


def test_a_patched_module_wins_over_a_copy_loaded_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While the module is not imported, a copy is read by loading it by path, which registers
    # the reader's own module (a file named gates.py, of the same code). Once the module is
    # imported again (after that one, as a suite's import order may have it) and patched, a
    # copy must be read from the imported module: the reader's own load never stands in.
    monkeypatch.delitem(sys.modules, "tether_kernels.gates")
    assert policy_module_data(_project(tmp_path / "first")) is not None
    monkeypatch.setitem(sys.modules, "tether_kernels.gates", gates)
    monkeypatch.setattr(gates, "GATES", ())
    found = policy_module_data(_project(tmp_path / "repo"))
    assert found is not None and found.gates == ()
