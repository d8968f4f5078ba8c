"""The import structure DESIGN.md's layout describes, read from the code's own imports (ast,
nothing imported): no module-level import circle; the kernel library a leaf that imports of
tether only the pure modules it shares (errors, the arch parser, the policy vocabulary); the
suite importing no kernel library; and a function-level import only where it defers an
optional dependency the base install lacks (torch, triton, matplotlib, numpy, pynvml,
FlashInfer, rich, pytest, directly or through a module that imports one at its top), or where
PENDING says why it is still there;
and the kernels fingerprint covering every kernel-library module an entry point runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tether import project

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "tether": ROOT / "lib" / "tether",
    "tether_kernels": ROOT / "kernels" / "tether_kernels",
    "tether_kernels_plugin": ROOT / "kernels" / "tether_kernels_plugin",
}
# Not in the base install (jinja2 only): rich draws the sweep's progress bar (the kernels extra),
# pytest is tether verify's and the plugin's (the dev extra), so `tether --help` defers them too.
HEAVY = frozenset(
    {"torch", "triton", "matplotlib", "numpy", "pynvml", "flashinfer", "rich", "pytest"}
)
# What the kernel library may import of tether: pure modules, no suite.
LEAF_MAY_IMPORT = frozenset({"tether", "tether.errors", "tether.arch", "tether.policy"})

# (importing module, imported module): why the function-level import is still there.
PENDING: dict[tuple[str, str], str] = {
    ("tether.store.audit", "fcntl"): "POSIX only: importing the store must not fail elsewhere",
}


def _modules() -> dict[str, Path]:
    found = {}
    for pkg, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [pkg, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest module of ours that ``name`` (a module or a module.attribute) names."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".")
        if MODULES[module].name != "__init__.py":
            here.pop()
        base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports(module: str) -> tuple[set[str], list[str]]:
    """(what ``module`` imports at its top, what it imports inside functions): our modules by
    name, others by their top-level package; ``if TYPE_CHECKING:`` blocks left out."""
    top: set[str] = set()
    lazy: list[str] = []

    def visit(parent: ast.AST, in_function: bool) -> None:
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _imported(node, module):
                    target = _known(name) or name.split(".")[0]
                    (lazy.append if in_function else top.add)(target)
            else:
                functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
                visit(node, in_function or isinstance(node, functions))

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")), False)
    return top, lazy


IMPORTS = {m: _imports(m) for m in MODULES}


def _reach(module: str) -> set[str]:
    """Everything ``module`` imports at module level, transitively."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for n in IMPORTS[todo.pop()][0]:
            if n in MODULES and n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def test_no_module_level_import_circle() -> None:
    circles = sorted(m for m in MODULES if m in _reach(m))
    assert not circles, f"modules that import themselves at module level: {circles}"


def test_the_kernel_library_is_a_leaf() -> None:
    """tether_kernels imports of tether only LEAF_MAY_IMPORT, at any level, and those import
    nothing more of tether: a user of single_prefill loads no suite."""
    bad = []
    for m in MODULES:
        if not m.startswith("tether_kernels") or m.startswith("tether_kernels_plugin"):
            continue
        top, lazy = IMPORTS[m]
        for t in (*top, *lazy):
            if t.startswith("tether_kernels_plugin") or (
                t.split(".")[0] == "tether" and t not in LEAF_MAY_IMPORT
            ):
                bad.append(f"{m} -> {t}")
    for shared in LEAF_MAY_IMPORT:
        beyond = {t for t in _reach(shared) if t.split(".")[0] == "tether"} - LEAF_MAY_IMPORT
        assert not beyond, f"{shared} imports {sorted(beyond)}"
    assert not bad, bad


def test_the_suite_imports_no_kernel_library() -> None:
    bad = [
        f"{m} -> {t}"
        for m in MODULES
        if m.split(".")[0] == "tether"
        for t in (*IMPORTS[m][0], *IMPORTS[m][1])
        if t.startswith("tether_kernels")
    ]
    assert not bad, bad


def _parents(module: str) -> list[str]:
    """The packages of ours whose ``__init__`` importing ``module`` runs first."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in MODULES]


def _heavy(target: str) -> bool:
    if target.split(".")[0] in HEAVY:
        return True
    if target not in MODULES:
        return False
    # As Python imports: a submodule's parent packages first (tether.bench.shard runs
    # tether.bench's __init__, which imports the sweep and its progress bar), at every step.
    seen: set[str] = set()
    todo = [target]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [n for n in (*IMPORTS[m][0], *_parents(m)) if n in MODULES]
    return any(t.split(".")[0] in HEAVY for m in seen for t in IMPORTS[m][0])


def test_function_level_imports_defer_a_heavy_dependency_or_say_why() -> None:
    found = {(m, t) for m in MODULES for t in IMPORTS[m][1] if not _heavy(t)}
    unexplained = sorted(found - set(PENDING))
    assert not unexplained, (
        f"function-level imports of light modules: {unexplained}; import them at the top "
        "(a circle they would close is a layering problem to fix, not to hide)"
    )
    gone = sorted(set(PENDING) - found)
    assert not gone, f"PENDING entries no longer in the code (remove them): {gone}"


# Kernel-library modules the entry points reach that the kernels fingerprint does not cover,
# and why. A change to one of them changes what a caller's call runs, yet would stale no timing
# run; adding a file to [tool.tether.fingerprint] kernels makes every timing and compile run
# stale (the declared set differs from the runs'), so a module found here joins with the next
# full re-measure. Empty: the per-call path (routing, shapes, declarations, direct launch)
# joined at the re-measure after 8db2926.
UNFINGERPRINTED: dict[str, str] = {}


def test_the_kernels_fingerprint_covers_what_an_entry_point_runs() -> None:
    """Every module of the kernel library that single_prefill's import reaches, at the top
    or inside a function, is a declared kernel source (or listed in UNFINGERPRINTED): a change
    to it makes the timing runs that describe the old code stale."""
    declared = {p.resolve() for p in project.get(ROOT).kernel_files()}
    seen: set[str] = set()
    todo = ["tether_kernels", "tether_kernels.prefill"]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        top, lazy = IMPORTS[m]
        todo += [t for t in (*top, *lazy) if t in MODULES and t.startswith("tether_kernels.")]
    missing = sorted(m for m in seen if MODULES[m].resolve() not in declared)
    assert missing == sorted(UNFINGERPRINTED), (
        f"kernel-library modules an entry point runs, outside [tool.tether.fingerprint] "
        f"kernels: {missing}; declared as pending: {sorted(UNFINGERPRINTED)}"
    )
