"""Whether a timing run still describes the code: the kernel files its arms use, unchanged.

A run records the git commit it was measured at and a fingerprint of the project's kernel
sources ([tool.tether.fingerprint] kernels). When the checkout's fingerprint differs, git
tells which kernel files changed since the run's commit (code only: a docstring or comment
edit does not change the fingerprint either). A changed file is one the run's arms use unless
it defines jitted kernels and none of them is a kernel the run recorded its arms running
(``Cell.kernels``): a file that defines no kernel (arms, routing, launch tables) may shape any
arm, so it always counts, except where the project declares top-level definitions of it to
serve some arches only ([tool.tether.fingerprint] arch_scoped, the AMD launch tables say): a
change confined to those definitions counts only for runs on those arches. A routing file
([tool.tether.fingerprint] routing: a policy, with the arms that read it) counts only for runs
one of whose arms reads it: an arm prepared directly runs the same code wherever the policy
sends a call.

A verify run records no kernels either: it runs the whole suite, every kernel, so every
changed kernel file counts for it (the arch scopes still apply).

A compile run records no kernels it ran: it compiles the variants that some kernel files
define and enumerate ([tool.tether.fingerprint] compiled; undeclared, every kernel file). It
is stale when one of those changed in code since its commit, the arch-scoped confinement
above applying as it does to timing runs; a change to any other kernel file (another
kernel, the policy) leaves its variants as they were (``KernelDiff.compile_staleness``,
``fresh_compile_run``).

Also the append-only rule: ``store_changes_since`` lists run files that were in the store at
a git revision and are now modified or gone.

GPU-free and torch-free, like the check that calls it.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tether import cache, project
from tether.errors import RunFileError, UsageError
from tether.gitobjects import GitObjectError, reader
from tether.store import layout
from tether.store.cite import latest_ok
from tether.store.history import origin
from tether.store.io import unpack
from tether.store.model import Run
from tether.store.provenance import (
    definition_digests,
    fingerprint,
    kernels_fingerprint,
    source_digest,
)
from tether.store.results import CompileResults
from tether.textfile import read_text

GIT_TIMEOUT_S = 10.0


class GitUnavailable(Exception):
    """git could not answer (no repository, unknown revision, no git)."""


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitUnavailable(str(exc)) from None
    if done.returncode != 0:
        raise GitUnavailable(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout


def _decoded(raw: bytes | None) -> str | None:
    """A file's bytes from git as text, as ``git show`` gave it; None when absent or not UTF-8."""
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def jitted_kernels(text: str) -> set[str]:
    """Names of the functions ``text`` decorates with a ``*.jit`` (triton, gluon) decorator."""
    return set(cache.kept_by_text("jitted-kernels", text, _jitted_kernels, (frozenset,)))


def _jitted_kernels(text: str) -> frozenset[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            last = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if last == "jit":
                names.add(node.name)
    return frozenset(names)


def recorded_kernels(run: Run) -> set[str]:
    """Every kernel name the run's cells recorded any arm running."""
    return {name for cell in run.cells for names in cell.kernels.values() for name in names}


def _ran(kernel: str, recorded: Iterable[str]) -> bool:
    # Profilers print a Triton kernel under its function name, sometimes with a suffix.
    return any(r == kernel or r.startswith(kernel + "_") for r in recorded)


@dataclass(frozen=True)
class Staleness:
    """What changed since a run: ``used`` the changed kernel files its arms use, ``unused``
    the others; ``unknown`` says why git could not tell (then every change counts)."""

    used: tuple[str, ...]
    unused: tuple[str, ...]
    unknown: str | None = None

    @property
    def stale(self) -> bool:
        return bool(self.used) or self.unknown is not None


def git_place(root: Path) -> tuple[Path, str]:
    """(where git runs, the project's path inside that repository, "" or ending in /) for
    the project at ``root``. A snapshot (tether check judges the index or a revision in a
    copy without .git) asks its repository, on the project's paths inside it."""
    found = origin(root)
    if found is not None:
        top, prefix = found
        return top, "" if prefix == Path(".") else prefix.as_posix() + "/"
    try:
        return root, _git(root, "rev-parse", "--show-prefix").strip()
    except GitUnavailable:
        return root, ""


# (whether a kernel file differs in code at a commit, the arches a change confined to
# arch-scoped definitions reaches or None), ``KernelDiff._compare``.
Compared = tuple[bool, frozenset[str] | None]
KERNEL_DIFF = "kernel-diff"


def _valid_comparisons(value: object) -> bool:
    """A kept ``KernelDiff`` entry: full commit ids to ``Compared``."""
    if not isinstance(value, dict):
        return False
    for sha, compared in value.items():
        if not isinstance(sha, str) or not _FULL_SHA.fullmatch(sha):
            return False
        if not isinstance(compared, tuple) or len(compared) != 2:
            return False
        differs, arches = compared
        if not isinstance(differs, bool):
            return False
        if arches is not None and not (
            differs and isinstance(arches, frozenset) and all(isinstance(a, str) for a in arches)
        ):
            return False
    return True


class KernelDiff:
    """Which kernel files changed between a commit and the checkout, cached per commit."""

    def __init__(
        self,
        root: Path,
        kernel_files: Iterable[Path],
        arch_scoped: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
        routing: Mapping[str, tuple[str, ...]] | None = None,
    ):
        self.root = root
        self.files = sorted(p.relative_to(root).as_posix() for p in kernel_files)
        self.git_root, self.prefix = git_place(root)
        self.arch_scoped = arch_scoped or {}
        self.routing = routing or {}
        self._changed: dict[str, tuple[str, ...] | str] = {}
        # (sha, file) -> the arches a change confined to arch-scoped definitions serves.
        self._confined: dict[tuple[str, str], frozenset[str]] = {}
        # file -> the kernels it defines in the checkout: read once, however many runs ask.
        self._defined: dict[str, set[str]] = {}
        # file -> its text in the checkout (None: absent), read once for every commit.
        self._texts: dict[str, str | None] = {}
        # file -> (its kept entry's key, {full commit id: its comparison}), see ``_compared``.
        self._kept: dict[str, tuple[str, dict[str, Compared]]] = {}

    def changed(self, sha: str) -> tuple[str, ...] | str:
        """Kernel files whose code differs at ``sha`` from the checkout, or why git cannot
        tell (a string)."""
        if sha not in self._changed:
            self._changed[sha] = self._diff(sha)
        return self._changed[sha]

    def _diff(self, sha: str) -> tuple[str, ...] | str:

        if not sha or sha == "unknown":
            return "the run recorded no git commit"
        cat = reader(self.git_root)
        try:
            if cat.read(f"{sha}^{{commit}}") is None:
                return f"git cannot compare commit {sha[:12]} with the checkout (no such commit)"
        except GitObjectError as exc:
            return f"git cannot compare commit {sha[:12]} with the checkout ({exc})"
        out = []
        for rel in self.files:
            differs, arches = self._compared(sha, rel)
            if differs:
                out.append(rel)
                if arches is not None:
                    self._confined[(sha, rel)] = arches
        return tuple(out)

    def _now(self, rel: str) -> str | None:
        if rel not in self._texts:
            path = self.root / rel
            self._texts[rel] = read_text(path, rel) if path.is_file() else None
        return self._texts[rel]

    def _compared(self, sha: str, rel: str) -> Compared:
        """``_compare``, kept per checkout file (``tether.cache.kept_entry``): one entry per
        file maps each full commit id to its comparison, keyed by the file's path, its text
        in the checkout and its arch scopes, so a commit that edits one kernel file compares
        that file alone again with every commit the runs name (a commit's tree never
        changes). A short commit id may name another commit as the repository grows, and
        a read git failed could be answered next time: neither is kept."""
        if not _FULL_SHA.fullmatch(sha):
            return self._compare(sha, rel)[0]
        if rel not in self._kept:
            now = self._now(rel)
            scoped = sorted(self.arch_scoped.get(rel, {}).items())
            text = "-" if now is None else cache.digest(now)
            key = cache.digest(self.prefix, rel, text, repr(scoped))
            self._kept[rel] = (key, cache.kept_entry(KERNEL_DIFF, key, _valid_comparisons))
        key, known = self._kept[rel]
        found = known.get(sha)
        if found is None:
            found, certain = self._compare(sha, rel)
            if certain:
                known[sha] = found
                cache.keep_entry(KERNEL_DIFF, key, known)
        return found

    def _compare(self, sha: str, rel: str) -> tuple[Compared, bool]:
        """(whether ``rel`` differs in code at ``sha`` from the checkout, with the arches a
        difference confined to arch-scoped definitions reaches; whether git answered).
        Compared as code (docstrings and comments aside) with the commit's version: the
        judged tree may be a snapshot of the index, not the work tree. The commit's files
        come through one cat-file process (tether.gitobjects)."""
        now = self._now(rel)
        certain = True
        try:
            raw = reader(self.git_root).read(f"{sha}:{self.prefix}{rel}")
        except GitObjectError:
            raw, certain = None, False
        then = _decoded(raw)
        if now is None or then is None or source_digest(now) != source_digest(then):
            return (True, confined_to(then, now, self.arch_scoped.get(rel, {}))), certain
        return (False, None), certain

    def _since(self, run: Run, current_fingerprint: str) -> Staleness | tuple[str, ...]:
        """The kernel files changed in code since ``run``'s commit, or the Staleness that
        settles the run without them: fresh at the same fingerprint, unknown from a dirty
        tree or where git cannot tell."""
        prov = run.provenance
        if prov.kernels_fingerprint == current_fingerprint:
            return Staleness((), ())
        if prov.git_dirty:
            return Staleness((), (), "the run was made from a dirty tree")
        changed = self.changed(prov.git_sha)
        if isinstance(changed, str):
            return Staleness((), (), changed)
        if not changed:
            # The fingerprints differ but git sees no code change in the declared files: the
            # declaration itself changed (a file added or removed), which git cannot place.
            return Staleness((), (), "the declared kernel files differ from the run's")
        return changed

    def _kernels_in(self, rel: str) -> set[str]:
        """The jitted kernels the checkout's ``rel`` defines, parsed once per KernelDiff."""
        if rel not in self._defined:
            text = self._now(rel)
            self._defined[rel] = jitted_kernels(text) if text else set()
        return self._defined[rel]

    def _elsewhere(self, run: Run, rel: str) -> bool:
        """Whether the change to ``rel`` since ``run``'s commit is confined to definitions of
        other arches than the run's (arch_scoped)."""
        arches = self._confined.get((run.provenance.git_sha, rel))
        return arches is not None and run.provenance.arch not in arches

    def _routes_none_of(self, run: Run, rel: str) -> bool:
        """Whether ``rel`` is a routing file (declared with the arms that read it) and none of
        ``run``'s arms reads it: a run that times arms prepared directly (the Gluon kernel
        against cuDNN) times the same code whichever arm the policy sends a call to. A run
        that records no arms, and a verify run (it runs the entry points), is read by all."""
        readers = self.routing.get(rel)
        if readers is None or run.kind == "verify":
            return False
        arms = set(run.arms.values())
        return bool(arms) and not arms & set(readers)

    def staleness(self, run: Run, current_fingerprint: str) -> Staleness:
        """How timing ``run`` stands against the checkout's kernel sources."""
        changed = self._since(run, current_fingerprint)
        if isinstance(changed, Staleness):
            return changed
        recorded = recorded_kernels(run)
        used: list[str] = []
        unused: list[str] = []
        for rel in changed:
            defined = self._kernels_in(rel)
            # A change confined to other arches' definitions, to kernels the run never ran
            # (a verify run ran them all), or to routing no arm of the run reads.
            ran = not defined or run.kind == "verify" or any(_ran(k, recorded) for k in defined)
            ran = ran and not self._routes_none_of(run, rel)
            (used if ran and not self._elsewhere(run, rel) else unused).append(rel)
        return Staleness(tuple(used), tuple(unused))

    def compile_staleness(
        self, run: Run, current_fingerprint: str, inputs: Iterable[str]
    ) -> Staleness:
        """How compile ``run`` stands against the checkout: ``used`` the changed kernel files
        among ``inputs`` (root-relative: what compile runs compile from) whose change is not
        confined to other arches' definitions; any other changed file is ``unused``."""
        changed = self._since(run, current_fingerprint)
        if isinstance(changed, Staleness):
            return changed
        wanted = set(inputs)
        used: list[str] = []
        unused: list[str] = []
        for rel in changed:
            (used if rel in wanted and not self._elsewhere(run, rel) else unused).append(rel)
        return Staleness(tuple(used), tuple(unused))


class CompileFreshness:
    """Whether compile runs still describe the checkout at ``root``: ``KernelDiff``'s
    ``compile_staleness`` against [tool.tether.fingerprint] compiled (every kernel file where
    it is not declared), git's answers cached. The check, the documents and ``tether
    compile``'s cache all judge compile runs through this."""

    def __init__(self, root: Path):
        proj = project.get(root)
        self.current = kernels_fingerprint(root)
        self.inputs = tuple(p.relative_to(proj.root).as_posix() for p in proj.compiled_files())
        self.diff = KernelDiff(proj.root, proj.kernel_files(), proj.arch_scoped, proj.routing)

    def staleness(self, run: Run) -> Staleness:
        return self.diff.compile_staleness(run, self.current, self.inputs)

    def stale(self, run: Run) -> bool:
        return self.staleness(run).stale


def fresh_compile_run(
    fresh: CompileFreshness, runs: Iterable[Run], kernel: str, arch: str, compiler: str
) -> Run | None:
    """The newest ok compile run of ``kernel`` on ``arch`` made by ``compiler`` (``triton
    3.6.0``), when it still describes the checkout; else None."""
    made = [
        r
        for r in runs
        if r.kind == "compile"
        and r.status == "ok"
        and CompileResults.from_json(r.results, r.path).made_by == compiler
    ]
    run = latest_ok(made, "compile", kernel, arch)
    return None if run is None or fresh.stale(run) else run


def confined_to(
    then: str | None, now: str | None, scoped: Mapping[str, tuple[str, ...]]
) -> frozenset[str] | None:
    """The arches a change from ``then`` to ``now`` can reach when it is confined to the
    arch-scoped definitions ``scoped`` ({top-level name: arches}); None when any other code
    changed, the file is new or gone, or either side does not parse (the change counts for
    every arch)."""
    if not scoped or then is None or now is None:
        return None
    before, after = definition_digests(then), definition_digests(now)
    if before is None or after is None:
        return None
    arches: set[str] = set()
    for name in before.keys() | after.keys():
        if before.get(name) == after.get(name):
            continue
        if name not in scoped:
            return None
        arches.update(scoped[name])
    return frozenset(arches)


COMMIT_KERNELS = "commit-kernels"
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


class CommitKernels:
    """The kernels fingerprint of the tree at a commit, computed as a run computes it (the
    commit's own [tool.tether.fingerprint] kernels, its files' code), cached per commit: a
    run that records a commit and a clean tree must carry that commit's fingerprint, or it
    was measured from other sources than it names (a wrong TETHER_GIT_SHA stamp)."""

    def __init__(self, root: Path):
        self.root = root
        self.git_root, self.prefix = git_place(root)
        self._at: dict[str, str | None] = {}

    def at(self, sha: str) -> str | None:
        """The fingerprint of ``sha``'s kernel sources; None when git cannot tell."""
        if sha not in self._at:
            self._at[sha] = self._kept(sha)
        return self._at[sha]

    def _kept(self, sha: str) -> str | None:
        """``_compute``, kept by the full commit id (``tether.cache.kept``): a commit's tree
        never changes, so its fingerprint is worked out once per clone, where each check
        archived and parsed every commit a run names. "Git cannot tell" (None) is not kept:
        it may be able to next time."""
        if not _FULL_SHA.fullmatch(sha):
            return self._compute(sha)
        return cache.kept(
            COMMIT_KERNELS,
            lambda: cache.digest(sha, self.prefix),
            lambda: self._compute(sha),
            lambda value: isinstance(value, str),
        )

    def _compute(self, sha: str) -> str | None:
        if not sha or sha == "unknown":
            return None
        try:
            config = _decoded(
                reader(self.git_root).read(f"{sha}:{self.prefix}{project.CONFIG_FILE}")
            )
        except GitObjectError:
            return None
        if config is None:
            return None
        with tempfile.TemporaryDirectory(prefix="tether-commit-") as tmp:
            top = Path(tmp)
            (top / project.CONFIG_FILE).write_text(config, encoding="utf-8")
            try:
                proj = project.load(top)
            except UsageError:
                return None
            # The literal folders the globs start in: only they are taken out of the commit.
            roots = sorted(
                {
                    "/".join(_literal_parts(PurePosixPath(g).parts[:-1])) or "."
                    for g in proj.kernel_globs
                }
            )
            paths = [self.prefix + r if r != "." else self.prefix or "." for r in roots]
            try:
                done = subprocess.run(
                    ["git", "-C", str(self.git_root), "archive", "--format=tar", sha, "--", *paths],
                    capture_output=True,
                    timeout=GIT_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
            if done.returncode != 0:
                return None
            with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
                for member in tar.getmembers():
                    name = PurePosixPath(member.name)
                    if (
                        not member.isfile()
                        or not member.name.startswith(self.prefix)
                        or name.is_absolute()
                        or ".." in name.parts
                    ):
                        continue
                    data = tar.extractfile(member)
                    if data is None:
                        continue
                    dest = top / member.name[len(self.prefix) :]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(data.read())
            return fingerprint(proj.kernel_files(), top)


def _literal_parts(parts: Iterable[str]) -> list[str]:
    """The leading parts of a glob's folder that hold no wildcard."""
    out = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        out.append(part)
    return out


def _git_bytes(root: Path, *args: str) -> bytes | None:
    """git's output as bytes (a file's content at a revision), or None where git fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _json_of(path: str, raw: bytes | None) -> bytes | None:
    """The JSON bytes a run file's content holds (unpacked for ``.json.gz``), or None."""
    if raw is None or not layout.is_packed(path):
        return raw
    try:
        return unpack(raw, Path(path))
    except RunFileError:
        return None


def _packed_in_place(root: Path, top: Path, base: str, path: str, staged: bool) -> bool:
    """Whether the run file ``path`` (relative to the repository's ``top``), gone since
    ``base``, is there in its other form (packed or unpacked, in the index when ``staged``,
    else in the working tree) holding exactly the JSON it held: ``tether store pack``
    replaced it, and the run is the one it was."""
    run_id = layout.run_id_of(path)
    if run_id is None:
        return False
    suffix = layout.RUN_SUFFIX if layout.is_packed(path) else layout.PACKED_SUFFIX
    twin = str(PurePosixPath(path).with_name(run_id + suffix))
    before = _json_of(path, _git_bytes(root, "show", f"{base}:{path}"))
    if staged:
        now = _git_bytes(root, "show", f":{twin}")
    else:
        file = top / twin
        now = file.read_bytes() if file.is_file() else None
    after = _json_of(twin, now)
    return before is not None and before == after


def store_changes_since(root: Path, store: Path, rev: str) -> list[tuple[str, str]]:
    """Run files present in the store at the merge-base of ``rev`` and HEAD that are now
    modified or gone (in the index or the working tree), as (path, what); raises
    GitUnavailable when git cannot tell. A run file replaced by its other form holding the
    same JSON (``tether store pack``) is neither: the run is the one it was."""
    base = _git(root, "merge-base", rev, "HEAD").strip()
    rel = store.resolve().relative_to(root.resolve()).as_posix()
    top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
    found: dict[str, str] = {}
    for where, extra in (("committed or staged", ("--cached",)), ("in the working tree", ())):
        listing = _git(root, "diff", *extra, "--no-renames", "--name-status", base, "--", rel)
        for line in listing.splitlines():
            status, _, path = line.partition("\t")
            if layout.run_id_of(PurePosixPath(path).name) is None:
                continue
            if status[:1] not in ("M", "D", "T"):
                continue
            if status[:1] == "D" and _packed_in_place(root, top, base, path, bool(extra)):
                continue
            what = "removed" if status[:1] == "D" else "modified"
            found.setdefault(path, f"{what} {where} since {base[:12]} (merge-base with {rev})")
    return sorted(found.items())
