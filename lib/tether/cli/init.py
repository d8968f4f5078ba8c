"""``tether init``: set up tether in an existing repository, touching only what it must.

It writes, and never overwrites:

- the ``[tool.tether]`` table, appended to ``pyproject.toml`` (created when there is none);
- a plugin module (default ``tether_bench.py``) with a case model, one example arm pair and a
  sweep that runs on the CPU, to be replaced by the project's own kernels;
- a results template (``docs_src/results.md.j2``) that includes tether's built-in table;
- a ``results`` region at the end of the Markdown README (created when there is none),
  rendered from the store as it is (empty: it says no run is there yet);
- the ``tether check`` hook in ``.pre-commit-config.yaml`` (created when there is none);
- the scan baseline (``tether-scan-baseline.json``, what ``tether check --baseline`` writes),
  when the repository's own text already types figures or claim words: the check reports
  only new ones, so adopting tether asks no edit of text it did not write.

Appended text takes each file's own line endings, so a CRLF file stays CRLF. Then
``tether sweep example``, ``tether render``, ``git add -A`` and ``tether check`` pass with no
edit (the check judges the index, what a commit records, so what init wrote is staged first).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from tether import project
from tether._scan import DEFAULT_BASELINE, scan_tree, write_baseline
from tether.cli import Subparsers
from tether.errors import UsageError
from tether.project import CONFIG_FILE, TABLE
from tether.render import write_all
from tether.render.regions import syntax_for

SWEEP = "example"
REGION = "results"
TEMPLATE = "results.md.j2"
HOOKS = ".pre-commit-config.yaml"

PLUGIN = '''\
"""What tether measures in this repository: a case model, two arms and one sweep.

Imported by tether because [tool.tether] plugins names this module. Replace the example arms
with this project's kernels; the sweep runs on the CPU so that it works before any GPU is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether import registry
from tether.bench.engine import TimingPolicy
from tether.registry import Sweep


@dataclass(frozen=True)
class ScaleCase:
    """One cell: a vector of ``n`` f32 values scaled by two."""

    n: int

    @property
    def work(self) -> float:
        return float(2 * 4 * self.n)  # bytes moved: read x once, write the output once

    def fields(self) -> dict[str, Any]:
        return {{"n": self.n}}

    def inputs(self, device: str, seed: int) -> Any:
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(self.n, device=device, generator=gen)

    def reach(self, arch: str) -> dict[str, Any]:
        return {{}}  # no router: both arms are public functions


@registry.case("{case}")
def scale_case(fields: Mapping[str, Any]) -> ScaleCase:
    return ScaleCase(int(fields["n"]))


@dataclass(frozen=True)
class TorchArm:
    name: str
    fn: Callable[[Any], Any]
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: ScaleCase, arch: str) -> str | None:
        return None

    def prepare(self, case: ScaleCase, x: Any, arch: str) -> Callable[[], Any]:
        fn = self.fn
        return lambda: fn(x)

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return ()  # not checked; list the profiler names of your kernels here


registry.arm(TorchArm("{case}_mul", lambda x: x * 2.0))
registry.arm(TorchArm("{case}_add", lambda x: x + x))

registry.sweep(
    Sweep(
        name="{sweep}",
        case="{case}",
        axes={{"n": (1 << 12, 1 << 16)}},
        fixed={{}},
        arms={{"A": "{case}_mul", "B": "{case}_add"}},
        unit="B",
        timing=TimingPolicy(min_sample_s=1e-3, min_reps=6, max_reps=12, cell_cap_s=0.5),
        needs_gpu=False,
        description="the example pair: x * 2 against x + x, f32, on this host",
    )
)
'''

RESULTS_TEMPLATE = """\
{{#- The README's results region ([tool.tether.render] region_templates); tether renders it from
    the store. Set results_sweep to show another sweep than the headline. -#}}
{{% include "tether/results.md.j2" %}}
"""

HOOK = """\
  - repo: local
    hooks:
      - id: tether-check
        name: tether check
        entry: tether check --quiet
        language: system
        pass_filenames: false
        always_run: true
"""


@dataclass(frozen=True)
class Plan:
    """What init writes, worked out before anything is written."""

    root: Path
    plugin_path: str  # relative, e.g. benchmark/tether_bench.py
    templates: str
    readme: str
    store: str

    @property
    def module(self) -> str:
        return ".".join(PurePosixPath(self.plugin_path).with_suffix("").parts)

    def table(self) -> str:
        return (
            f"\n[{TABLE}]\n"
            f'store = "{self.store}"\n'
            'scratch = "scratch"\n'
            f'templates = "{self.templates}"\n'
            "# Modules whose import registers this project's arms and sweeps with tether.\n"
            f'plugins = ["{self.module}"]\n'
            f'headline = "{SWEEP}"\n'
            "\n"
            f"[{TABLE}.fingerprint]\n"
            "# Code that decides what a sample means: a change to it supersedes earlier runs.\n"
            f'harness = ["{self.plugin_path}"]\n'
            f'kernels = ["{self.plugin_path}"]\n'
            "\n"
            f"[{TABLE}.render.region_templates]\n"
            "# Regions tether renders inside hand-written files, each from its template.\n"
            f'"{self.readme}" = {{ {REGION} = "{TEMPLATE}" }}\n'
        )


def _eol(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _append(path: Path, addition: str) -> None:
    """Append ``addition`` (written with LF) to ``path`` in the file's own line endings."""
    old = path.read_bytes().decode("utf-8") if path.exists() else ""
    eol = _eol(old)
    if old and not old.endswith("\n"):
        old += eol
    path.write_bytes((old + addition.replace("\n", eol)).encode("utf-8"))


def _has_table(text: str) -> bool:
    return re.search(r"^\[tool\.tether(?:\.[^\]]*)?\]", text, re.MULTILINE) is not None


def _hook_addition(text: str) -> str:
    """The text that adds the hook to an existing ``.pre-commit-config.yaml``."""
    if "tether check" in text:
        return ""
    if not re.search(r"^repos:", text, re.MULTILINE):
        return "repos:\n" + HOOK
    keys = re.findall(r"^([A-Za-z_][\w-]*):", text, re.MULTILINE)
    if keys[-1] != "repos":
        raise UsageError(
            f"{HOOKS}: `repos:` is not the last top-level key, so the tether hook cannot be "
            f"appended safely; add this item to repos by hand:\n{HOOK}"
        )
    items = re.findall(r"^([ \t]*)- repo:", text, re.MULTILINE)
    indent = items[-1] if items else "  "
    return "".join(indent + line[2:] + "\n" for line in HOOK.splitlines())


def plan(root: Path, plugin: str, templates: str, readme: str | None, store: str) -> Plan:
    """The plan for ``root``, or a UsageError naming the first thing in the way."""
    root = root.resolve()
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder")
    config = root / CONFIG_FILE
    if config.exists() and _has_table(config.read_text(encoding="utf-8")):
        raise UsageError(f"{config}: already has a [{TABLE}] table; tether is set up here")
    if not plugin.endswith(".py") or not re.fullmatch(r"[A-Za-z_][\w/]*\.py", plugin):
        raise UsageError(f"--plugin {plugin!r}: a .py path of importable names (benchmark/x.py)")
    if (root / plugin).exists():
        raise UsageError(f"{plugin}: exists; name another module with --plugin")
    if (root / templates / TEMPLATE).exists():
        raise UsageError(f"{templates}/{TEMPLATE}: exists; pass another --templates folder")
    if (root / DEFAULT_BASELINE).exists():
        raise UsageError(f"{DEFAULT_BASELINE}: exists; init writes the scan baseline there")
    if readme is None:
        readme = next(
            (n for n in ("README.md", "README.markdown") if (root / n).is_file()),
            "README.md",
        )
    if PurePosixPath(readme).suffix.lower() not in (".md", ".markdown"):
        raise UsageError(
            f"{readme}: the results table init writes is Markdown; pass --readme with a Markdown "
            "file to hold it (README.md, docs/results.md, ...)"
        )
    hooks = root / HOOKS
    if hooks.exists():
        _hook_addition(hooks.read_text(encoding="utf-8"))  # refuses before anything is written
    return Plan(root, plugin, templates, readme, store)


def apply(p: Plan, out: TextIO) -> list[str]:
    """Write the plan; returns the paths written, relative to the root."""
    written = []
    _append(p.root / CONFIG_FILE, p.table())
    written.append(CONFIG_FILE)
    module = p.root / p.plugin_path
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(PLUGIN.format(case=SWEEP, sweep=SWEEP), encoding="utf-8")
    written.append(p.plugin_path)
    template = p.root / p.templates / TEMPLATE
    template.parent.mkdir(parents=True, exist_ok=True)
    template.write_text(RESULTS_TEMPLATE.format(), encoding="utf-8")
    written.append(f"{p.templates}/{TEMPLATE}")
    syntax = syntax_for(p.readme)
    readme = p.root / p.readme
    lead = "" if readme.exists() else f"# {p.root.name}\n"
    region = f"{syntax.begin_fmt.format(id=REGION)}\n{syntax.end_fmt.format(id=REGION)}\n"
    _append(readme, f"{lead}\n{region}")
    written.append(p.readme)
    hooks = p.root / HOOKS
    addition = _hook_addition(hooks.read_text(encoding="utf-8") if hooks.exists() else "")
    if addition:
        _append(hooks, addition)
        written.append(HOOKS)
    # The region rendered now, from the store as it is (empty), so that the first check,
    # before any sweep, finds it current.
    write_all(p.root, project.get(p.root).store)
    for rel in written:
        print(f"wrote {rel}", file=out)
    # The text that was already there (init's own files are not: they type no figure) is
    # baselined, as `tether check --baseline` would, so the first check asks no edit of it.
    typed = scan_tree(p.root, skip=(module, template))
    if typed:
        baseline = write_baseline(p.root, typed).relative_to(p.root).as_posix()
        written.append(baseline)
        print(
            f"wrote {baseline}: {len(typed)} figure(s) or claim word(s) already typed in this "
            "repository's text, which tether check will not report (only new ones fail)",
            file=out,
        )
    print(
        f"next: tether sweep {SWEEP} && tether render && git add -A && tether check "
        f"(then replace the example arms in {p.plugin_path} with your kernels)",
        file=out,
    )
    return written


def _handle(args: argparse.Namespace, ctx: Any) -> int:
    out: TextIO = getattr(ctx, "out", None) or sys.stdout
    root = args.root if args.root is not None else Path.cwd()
    p = plan(root, args.plugin, args.templates, args.readme, args.store_folder)
    apply(p, out)
    return 0


def register(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "init",
        help="set up tether in an existing repository (config, plugin, template, hook)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--plugin",
        default="tether_bench.py",
        metavar="PATH",
        help="the plugin module to write, relative to the root (default: tether_bench.py)",
    )
    parser.add_argument(
        "--templates", default="docs_src", help="template folder (default: docs_src)"
    )
    parser.add_argument(
        "--readme", help="the README to hold the results region (default: the one there is)"
    )
    parser.add_argument(
        "--results",
        dest="store_folder",
        default="results",
        metavar="DIR",
        help="the results store folder (default: results)",
    )
    parser.set_defaults(handler=_handle)
