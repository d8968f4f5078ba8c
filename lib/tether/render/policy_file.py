"""The project's policy files (its ``[tool.tether] policy``) as data: POLICY, GATES,
COMPILE_GATES and TUNED, read without torch so the renderer and ``tether check`` run on any
machine.

Kept apart from the template context and the compile evidence, which both read it, so that
neither imports the other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple

from tether import project
from tether.errors import OSFailure
from tether.policy import Gate, Threshold, TunedChoice
from tether.render.env import TemplateError
from tether.store.provenance import source_digest
from tether.textfile import decode_text

__all__ = ["EMPTY", "PolicyData", "policy", "policy_module_data", "tuned_choices"]


class PolicyData(NamedTuple):
    """POLICY, GATES, COMPILE_GATES and TUNED of a project's policy files, by name."""

    policy: tuple[Threshold, ...]
    gates: tuple[Gate, ...]
    compile_gates: tuple[Any, ...]
    tuned: tuple[TunedChoice, ...]


EMPTY = PolicyData((), (), (), ())  # a project that declares no policy file
_NAMES = ("POLICY", "GATES", "COMPILE_GATES", "TUNED")
_LOADED_PREFIX = "_tether_policy_"  # modules this file loads from a path, by content
_POLICY_CACHE: dict[tuple[str, bytes], PolicyData] = {}


def _same_code(a: bytes, b: bytes) -> bool:

    return source_digest(a.decode("utf-8", "replace")) == source_digest(
        b.decode("utf-8", "replace")
    )


def _policy_of(module: Any) -> PolicyData:
    return PolicyData(*(tuple(getattr(module, name, ())) for name in _NAMES))


def policy_module_data(root: Path) -> PolicyData | None:
    """POLICY, GATES, COMPILE_GATES and TUNED of the project at ``root`` (its [tool.tether] policy
    files, in order, concatenated); None when it declares none.

    The project's own files, not whatever module this interpreter imported under that name:
    ``tether check --root OTHER`` must judge OTHER's policy against OTHER's store. A module
    already imported from this very file is used as is (with whatever a test patched into
    it), as is one whose code equals the file's (generated comments aside); any other is
    loaded from the file (data and pure dataclasses, no torch at import), cached by content.
    """

    proj = project.get(root)
    paths = proj.policies or ((proj.policy,) if proj.policy is not None else ())
    if not paths:
        return None
    found = [_one_file(path, proj.rel(path)) for path in paths]
    # Each part (POLICY, GATES, ...) of every file, concatenated in the files' order.
    return PolicyData(*(tuple(x for one in part for x in one) for part in zip(*found, strict=True)))


def tuned_choices(root: Path) -> tuple[TunedChoice, ...]:
    """TUNED of the project's policy files (() when it declares none)."""
    return (policy_module_data(root) or EMPTY).tuned


def _one_file(path: Path, label: str) -> PolicyData:
    if not path.is_file():
        raise TemplateError(f"{path}: the project's policy file is missing")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OSFailure(label, "read it", exc) from None
    decode_text(raw, label)  # not text: the file's error, named, before Python is asked
    for name, module in list(sys.modules.items()):
        # This loader's own loads (below) are never what a caller imported or patched: one
        # found first would hide the imported module of the same code (its tests' patches).
        if name.startswith(_LOADED_PREFIX):
            continue
        own = getattr(module, "__file__", None)
        if not own or not any(hasattr(module, n) for n in _NAMES):
            continue
        own_path = Path(own).resolve()
        if own_path == path.resolve() or (
            own_path.name == path.name and _same_code(own_path.read_bytes(), raw)
        ):
            return _policy_of(module)
    key = (str(path.resolve()), hashlib.sha256(raw).digest())
    if key not in _POLICY_CACHE:
        name = _LOADED_PREFIX + key[1].hex()[:16]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TemplateError(f"{path}: cannot load the policy module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module through sys.modules
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            del sys.modules[name]
            raise TemplateError(f"{label}:{exc.lineno}: not valid Python: {exc.msg}") from None
        _POLICY_CACHE[key] = _policy_of(module)
    return _POLICY_CACHE[key]


def policy(root: Path) -> tuple[tuple[Threshold, ...], tuple[Gate, ...]] | None:
    """POLICY and GATES of the project at ``root`` (see ``policy_module_data``)."""
    found = policy_module_data(root)
    return None if found is None else (found.policy, found.gates)
