"""Where a run came from: git state, host, versions, source fingerprints, and its unique id.

The harness fingerprint is what makes a run *superseded*: when what gives its samples their
meaning changes, the run is marked until re-measured. New runs record it per run, over the
definitions that run depends on (tether.store.harness: the timing engine, its case model, the
adapters of the arms it timed); runs recorded before that carry the whole-file fingerprint
below and are still judged by it. Fingerprints hash the parsed AST with docstrings removed,
so comments, formatting and the generated policy-comment regions do not change them, while
any change to code does.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tether import cache, project
from tether._pysource import docstring_owners
from tether.store.model import id_tail

# Modules of tether.bench whose code decides what a sample means (allocation, warm-up, timing,
# interleaving, A/A, fidelity). A change to any of them supersedes earlier runs.
MEASUREMENT_SOURCES: tuple[str, ...] = (
    "__init__",
    "engine",  # allocation, warm-up, interleaving, timed regions
    "fidelity",  # which kernels an arm really launched
    "gate",
    "probe",
    "shard",  # which worker times which cell
    "sweep",  # grid, A/A control, per-cell flags
)
# Modules of tether.bench that only present results; editing them must not supersede runs.
# A tether.bench module in neither tuple counts as measurement: a spurious supersede is a
# re-measure, a missed one is a published number from a harness that no longer exists.
PRESENTATION_SOURCES: tuple[str, ...] = ("progress", "report", "demo")
GIT_TIMEOUT_S = 5.0
UNKNOWN = "unknown"
BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def default_root() -> Path:
    """The configured project found from the working directory."""
    return project.find_root()


def _project(root: Path | None) -> Any:
    return project.get(root)


def bench_dir(root: Path | None = None) -> Path:
    """tether's own timing engine as the tree at ``root`` has it: its ``lib/tether/bench``
    when ``root`` is a tether checkout (so a check of the index or of ``--rev``, which runs on
    a copy of that tree, judges the engine being committed), else the installed one. In a
    checkout with tether installed from it the two are the same folder."""
    if root is not None:
        own = Path(root) / "lib" / "tether" / "bench"
        if (own / "engine.py").is_file() and (own.parent / "store" / "provenance.py").is_file():
            return own.resolve()
    return BENCH_DIR


def engine_files(engine: Path) -> list[Path]:
    """tether's own measurement modules in the bench folder ``engine`` (presentation aside)."""
    own = sorted(engine.glob("*.py")) if engine.is_dir() else []
    return [p for p in own if p.stem not in PRESENTATION_SOURCES]


def harness_files(root: Path | None = None, engine: Path | None = None) -> list[Path]:
    """tether's own measurement modules (of ``engine``, default ``bench_dir(root)``), then
    the project's declared harness files: the whole-file rule's files."""
    return engine_files(engine if engine is not None else bench_dir(root)) + (
        _project(root).harness_files()
    )


def kernel_files(root: Path | None = None) -> list[Path]:
    """The project's kernel sources ([tool.tether.fingerprint] kernels)."""
    return _project(root).kernel_files()


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in list(docstring_owners(tree)):
        node.body = node.body[1:] or [ast.Pass()]
    return tree


def _canonical(node: object) -> str:
    """The AST as text, leaving out what differs between Python versions but not code.

    ``ast.dump`` is not stable across interpreters: 3.12 added fields such as
    ``type_params=[]`` to every function, so the same source hashed differently on a host
    with another Python and every run from it looked superseded. Empty and None fields and
    the load/store context carry no code, so they are left out.
    """
    if isinstance(node, ast.AST):
        parts = []
        for name, value in ast.iter_fields(node):
            if name == "ctx" or value is None or (isinstance(value, list) and not value):
                continue
            parts.append(f"{name}={_canonical(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    return repr(node)


@functools.lru_cache(maxsize=4096)
def source_digest(text: str) -> str:
    """A stable text for hashing: the canonical AST without docstrings, or the raw text.

    Cached by the text itself: a check compares the checkout's kernel files with their
    version at every commit a run names, the same few texts many times over."""
    return cache.kept_by_text("source-digest", text, _source_digest, (str,))


def _source_digest(text: str) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        # A file mid-edit still gets a fingerprint; any change to it changes the hash.
        return "unparsable:" + text
    return _canonical(_strip_docstrings(tree))


def definition_digests(text: str) -> dict[str, str] | None:
    """The code of each top-level definition of a module, by name (as ``source_digest``
    canonicalises it: docstrings and comments aside), or None when ``text`` does not parse.

    A function, class or assignment to plain names counts under its name (twice-defined
    names, overloads say, under one key); every other top-level statement (imports, calls,
    tuple or subscript targets) under the key "", which names no definition."""
    return cache.kept_by_text("definition-digests", text, _definition_digests, (dict, type(None)))


def _definition_digests(text: str) -> dict[str, str] | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    parts: dict[str, list[str]] = {}
    for node in _strip_docstrings(tree).body:  # type: ignore[attr-defined]
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        code = _canonical(node)
        for name in names or [""]:
            parts.setdefault(name, []).append(code)
    return {name: "\n".join(codes) for name, codes in parts.items()}


# raw-bytes sha256 -> AST digest sha256: parsing and dumping dominate new_run's cost, and
# keying by content (not mtime) can never serve a stale digest.
_DIGESTS: dict[bytes, bytes] = {}


def _file_digest(path: Path) -> bytes:
    raw = path.read_bytes()
    key = hashlib.sha256(raw).digest()
    if key not in _DIGESTS:
        text = source_digest(raw.decode("utf-8", errors="surrogateescape"))
        _DIGESTS[key] = hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).digest()
    return _DIGESTS[key]


def _label(path: Path, root: Path) -> str:
    """A file's name in a fingerprint: tether's own modules by their package path (the same
    wherever tether is installed), the project's files relative to the project root."""
    for engine in (BENCH_DIR, bench_dir(root)):
        if path.is_relative_to(engine):
            return "tether/bench/" + path.relative_to(engine).as_posix()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


def fingerprint(files: Iterable[Path], root: Path) -> str:
    """``sha256:<hex>`` over (name, AST digest) of each file, in name order."""
    h = hashlib.sha256()
    for label, path in sorted((_label(p, root), p) for p in files):
        h.update(label.encode() + b"\0")
        h.update(_file_digest(path))
    return "sha256:" + h.hexdigest()


def harness_fingerprint(root: Path | None = None) -> str:
    """The whole-file fingerprint of the measurement harness of the tree at ``root`` (see
    MEASUREMENT_SOURCES and the project's [tool.tether.fingerprint] harness): what runs that
    recorded a ``sha256:`` harness fingerprint are judged against. Judge a run with
    tether.store.harness.CurrentHarness, which picks the rule by the run's format."""
    base = (root or default_root()).resolve()
    return fingerprint(harness_files(base), base)


def measured_harness_fingerprint(root: Path | None = None) -> str:
    """Whole-file fingerprint of the harness that measures in this process: the installed
    timing engine (the code that actually runs), with the project's harness files. Recorded
    by a new run whose harness cannot be named by definition (tether.store.harness)."""
    base = (root or default_root()).resolve()
    return fingerprint(harness_files(base, BENCH_DIR), base)


def kernels_fingerprint(root: Path | None = None) -> str:
    """Fingerprint of the project's kernel sources."""
    base = (root or default_root()).resolve()
    return fingerprint(kernel_files(base), base)


def git_state(root: Path | None = None) -> tuple[str, bool | None]:
    """(HEAD sha, dirty) of the checkout at ``root``; ("unknown", None) outside one.

    A valid TETHER_GIT_SHA stamp wins over the checkout's own git: whoever copied the tree
    to a lent host states what they copied, and a ``.git`` that travelled with the copy (or
    was left there by an earlier one) can name another commit. Seen on a lent H200: its
    ``.git`` still named the session's first commit, so runs of later commits were recorded
    as that commit, dirty.
    """
    stamped = stamped_git_state()
    if stamped[1] is not None:
        return stamped
    base = root or default_root()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(base), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=GIT_TIMEOUT_S,
        ).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        # Untracked files (results/, scratch) do not change what was measured.
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.SubprocessError):
        return stamped_git_state()
    if len(sha) != 40:
        return stamped_git_state()
    return sha, dirty


def stamped_git_state(environ: Mapping[str, str] | None = None) -> tuple[str, bool | None]:
    """(sha, dirty) stamped by whoever copied the tree to a host without its git history.

    A lent GPU host or a CI artifact builder may get the working tree without ``.git``; the
    sender then sets TETHER_GIT_SHA (40 hex) and TETHER_GIT_DIRTY (0 or 1). Anything else is
    "unknown": a malformed stamp is never guessed into a sha.
    """
    env = os.environ if environ is None else environ
    sha = env.get("TETHER_GIT_SHA", "").strip().lower()
    dirty = env.get("TETHER_GIT_DIRTY", "").strip()
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha) or dirty not in ("0", "1"):
        return UNKNOWN, None
    return sha, dirty == "1"


def runtime_versions(extra: Mapping[str, str | None] | None = None) -> dict[str, str | None]:
    """python always; torch/triton only if already imported (the store never imports torch)."""
    out: dict[str, str | None] = {"python": ".".join(map(str, sys.version_info[:3]))}
    for mod in ("torch", "triton"):
        loaded = sys.modules.get(mod)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        out[mod] = str(version) if version is not None else None
    for key, value in (extra or {}).items():
        out[key] = None if value is None else str(value)
    return out


# Environment variables that change what a sample means, recorded as set (None: unset).
ENVIRONMENT_VARS: tuple[str, ...] = (
    "TRITON_INTERPRET",  # the kernels ran in Triton's CPU interpreter, not compiled
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


def run_environment(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``provenance.environment``: the variables above as set, the host's CPU count and the
    threads torch uses on the CPU (only when torch is already imported: the store never
    imports it)."""
    env = os.environ if environ is None else environ
    out: dict[str, str | None] = {name: env.get(name) for name in ENVIRONMENT_VARS}
    cpus = os.cpu_count()
    out["cpu_count"] = str(cpus) if cpus is not None else None
    torch = sys.modules.get("torch")
    threads = getattr(torch, "get_num_threads", None) if torch is not None else None
    out["torch_threads"] = str(threads()) if callable(threads) else None
    return out


def make_id(kind: str, name: str, arch: str, started: str, digest: str) -> str:
    """``<yyyymmddTHHMMSSZ>-<kind>-<name>-<arch>-<digest's first hex digits>``: readable, sorted
    by time, and content-addressed (see tether.store.model.digest_of)."""
    compact = started.replace("-", "").replace(":", "")
    return f"{compact}-{kind}-{name}-{arch}-{id_tail(digest)}"
