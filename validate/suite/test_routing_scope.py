"""A routing file stales only the runs that time an arm reading it ([tool.tether.fingerprint]
routing): a policy scope change leaves the timings of arms prepared directly (the Gluon kernel
against cuDNN, the policy sweeps) describing the current code, and stales the entry points'
runs (single_prefill as called, per_request) and verify runs.

Two halves: the rule, on a FIXTURE repository with git; and the declaration this project makes
for kernels/tether_kernels/policy.py, held to the code: no module an arm is prepared from
imports the policy or the router, so only the entry points read it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from tether import project
from tether.errors import UsageError
from tether.freshness import KernelDiff
from tether.store import kernels_fingerprint

from validate.suite.fixture_project import fixture_project, git
from validate.suite.runfactory import make_sweep_run, make_verify_run, resealed

ROOT = Path(__file__).resolve().parents[2]

POLICY = '''"""Routing thresholds: no kernel here; the entry points read them."""
THRESHOLD = 2048
'''
ARMS = '''"""Arms: no kernel here, so any change may shape any arm."""
ARMS = ("triton",)
'''
ROUTING = (
    '[tool.tether.fingerprint.routing]\n"kernels/policy.py" = ["single_prefill", "per_request"]\n'
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed for the freshness rules and is not on PATH")
    root = tmp_path / "repo"
    fixture_project(root, extra=ROUTING)
    (root / "kernels").mkdir()
    (root / "kernels" / "policy.py").write_text(POLICY, encoding="utf-8")
    (root / "kernels" / "arms.py").write_text(ARMS, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "FIXTURE: kernels and a policy")
    return root


def _run(root: Path, arms: dict[str, str]):
    run = make_sweep_run(root=root, arms=arms)
    sha = git(root, "rev-parse", "HEAD").strip()
    return resealed(run, provenance={"git_sha": sha, "git_dirty": False})


def _verify_run(root: Path):
    run = make_verify_run(arch="sm90", vendor="cuda", root=root)
    sha = git(root, "rev-parse", "HEAD").strip()
    return resealed(run, provenance={"git_sha": sha, "git_dirty": False})


def _staleness(root: Path, run):
    proj = project.get(root)
    diff = KernelDiff(root, proj.kernel_files(), proj.arch_scoped, proj.routing)
    return diff.staleness(run, kernels_fingerprint(root))


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_policy_change_leaves_arms_prepared_directly_fresh(repo: Path) -> None:
    direct = _run(repo, {"A": "sdpa_cudnn", "B": "gluon"})
    _edit(repo, "kernels/policy.py", "THRESHOLD = 2048", "THRESHOLD = 1024")
    found = _staleness(repo, direct)
    assert not found.stale and found.unused == ("kernels/policy.py",)


@pytest.mark.parametrize(
    "arms",
    [
        pytest.param({"A": "sdpa_cudnn", "B": "single_prefill"}, id="entry-point"),
        pytest.param({"A": "per_request", "B": "gluon"}, id="routes-per-request"),
    ],
)
def test_a_policy_change_stales_the_runs_of_arms_that_read_it(
    repo: Path, arms: dict[str, str]
) -> None:
    run = _run(repo, arms)
    _edit(repo, "kernels/policy.py", "THRESHOLD = 2048", "THRESHOLD = 1024")
    assert _staleness(repo, run).used == ("kernels/policy.py",)


def test_a_verify_run_reads_every_routing_file(repo: Path) -> None:
    # It runs the entry points, which route by the policy.
    verify = _verify_run(repo)
    _edit(repo, "kernels/policy.py", "THRESHOLD = 2048", "THRESHOLD = 1024")
    assert _staleness(repo, verify).used == ("kernels/policy.py",)


def test_a_change_to_an_undeclared_file_still_stales_a_direct_run(repo: Path) -> None:
    direct = _run(repo, {"A": "sdpa_cudnn", "B": "gluon"})
    _edit(repo, "kernels/arms.py", 'ARMS = ("triton",)', 'ARMS = ("triton", "gluon")')
    _edit(repo, "kernels/policy.py", "THRESHOLD = 2048", "THRESHOLD = 1024")
    found = _staleness(repo, direct)
    assert found.used == ("kernels/arms.py",) and found.unused == ("kernels/policy.py",)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        pytest.param('"kernels/policy.py" = "single_prefill"', "non-empty list", id="a-string"),
        pytest.param('"kernels/policy.py" = []', "non-empty list", id="empty"),
        pytest.param('"kernels/policy.py" = [""]', "non-empty list", id="blank-arm"),
        pytest.param('"/abs/policy.py" = ["single_prefill"]', "inside the project", id="abs"),
    ],
)
def test_a_bad_routing_declaration_is_refused_by_name(
    tmp_path: Path, value: str, match: str
) -> None:
    root = fixture_project(
        tmp_path / "bad", extra="[tool.tether.fingerprint.routing]\n" + value + "\n"
    )
    with pytest.raises(UsageError, match=match) as err:
        project.get(root)
    assert "fingerprint] routing" in str(err.value) or "fingerprint.routing" in str(err.value)


# -- this project's declaration, held to its code ---------------------------------------------

KERNELS = ROOT / "kernels"
# The modules that only route: the policy, the router reading it, and the entry points.
ROUTING_MODULES = {"tether_kernels.policy", "tether_kernels.routing", "tether_kernels.prefill"}


def _module_file(name: str) -> Path | None:
    base = KERNELS.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path, module: str) -> set[str]:
    """The tether_kernels modules ``path`` imports, at any depth of its code (a function's
    late import counts: it runs when the arm is prepared)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("tether_kernels") and _module_file(m)}


def _closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is not None and name != "tether_kernels":
            # The package's own __init__ runs on any import of it (it re-exports the entry
            # points) but calls nothing of theirs on an arm's behalf: it is not followed.
            todo.extend(m for m in _imports(path, name) if m != "tether_kernels")
    return seen


def test_the_project_declares_its_policy_a_routing_file_read_by_its_entry_points() -> None:
    from tether_kernels.archs import PER_REQUEST
    from tether_kernels.routing import ENTRY_POINTS

    readers = project.get(ROOT).routing["kernels/tether_kernels/policy.py"]
    assert set(readers) == {*ENTRY_POINTS, PER_REQUEST}


@pytest.mark.parametrize(
    "module",
    [
        "tether_kernels.arms",
        "tether_kernels.gluon.arm",
        "tether_kernels.gluon.launch",
        "tether_kernels.triton.attn_fwd",
        "tether_kernels.peers",
    ],
)
def test_no_module_an_arm_is_prepared_from_reads_the_policy(module: str) -> None:
    # If one did, a scope change could change what a directly prepared arm runs, and the
    # routing declaration would leave its runs fresh wrongly.
    reached = _closure(module) & ROUTING_MODULES
    assert not reached, f"{module} reaches {sorted(reached)}: it reads the routing policy"


def test_the_import_walk_finds_the_policy_where_it_is_read() -> None:
    # The walk above can fail: from the router it reaches the policy.
    assert "tether_kernels.policy" in _closure("tether_kernels.routing")


def test_the_paged_entry_point_is_a_routing_file_no_other_arm_reaches() -> None:
    # paged_prefill's module is declared read by paged_prefill alone: the other entry points
    # and every arm module must not import it (else a change to it would leave their runs
    # fresh wrongly), and it must reach what it routes with (so the walk can see it).
    assert project.get(ROOT).routing["kernels/tether_kernels/paged.py"] == ("paged_prefill",)
    for module in (
        "tether_kernels.arms",
        "tether_kernels.prefill",
        "tether_kernels.routing",
        "tether_kernels.gluon.arm",
        "tether_kernels.triton.attn_fwd",
        "tether_kernels.peers",
    ):
        assert "tether_kernels.paged" not in _closure(module), module
    assert "tether_kernels.routing" in _closure("tether_kernels.paged")
