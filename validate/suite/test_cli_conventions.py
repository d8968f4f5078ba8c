"""CLI conventions a maintainer expects: --version, a quiet exit on a closed pipe, a description
on every verb's help and help on every option, config mistakes (broken TOML, an unknown plugin
module or headline sweep) named as such, a --store typo an error for every verb that reads,
global options after the verb, and --json from the check. FIXTURE projects in tmp_path."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether import __version__
from tether.cli import build_parser, main

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_fixture_store

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out.strip() == f"tether {__version__}"


def _verbs(parser: argparse.ArgumentParser, prefix: str = "tether"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _verbs(sub, f"{prefix} {name}")


def test_every_verb_has_a_description() -> None:
    verbs = dict(_verbs(build_parser()))
    assert {"tether init", "tether sweep", "tether store ls", "tether compile"} <= set(verbs)
    empty = sorted(name for name, sub in verbs.items() if not (sub.description or "").strip())
    assert not empty, f"verbs whose --help has no description: {empty}"


def test_each_verb_is_registered_by_the_module_verb_modules_names() -> None:
    """The verb-to-module table a call's import rests on agrees with what each module
    registers: every verb of the full parser is in it, and a parser built for one verb has it."""
    from tether.cli import VERB_MODULES

    top = {name.split()[1] for name, _ in _verbs(build_parser()) if len(name.split()) == 2}
    assert top == set(VERB_MODULES)
    for verb in VERB_MODULES:
        assert f"tether {verb}" in dict(_verbs(build_parser(verb=verb)))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["--nosuch"], "unrecognized arguments: --nosuch", id="top-level"),
        pytest.param(["nosuch"], "invalid choice: 'nosuch'", id="unknown-verb"),
        pytest.param(["check", "--rev"], "check: argument --rev: expected one", id="verb"),
        pytest.param(["store", "nosuch"], "store: argument VERB: invalid choice", id="sub-verb"),
    ],
)
def test_a_usage_error_names_tether_once(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """main prints "tether: error: " before the message, so the parser adds no second one."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether: error: ") and says in err, err
    assert err.count("tether") == 1, err


@pytest.mark.parametrize(
    ("argv", "verb"),
    [
        pytest.param(["check", "--quiet"], "check", id="verb-first"),
        pytest.param(["--root", "check", "store", "ls"], "store", id="root-value-is-no-verb"),
        pytest.param(["--store=x", "--debug", "render"], "render", id="options-before"),
        pytest.param(["--version"], None, id="no-verb"),
        pytest.param([], None, id="empty"),
    ],
)
def test_verb_of_finds_the_verb_past_global_options(argv: list[str], verb: str | None) -> None:
    from tether.cli import verb_of

    assert verb_of(argv) == verb


def test_check_imports_no_measuring_code() -> None:
    """The pre-commit hook's verb loads neither the timing engine nor pytest."""
    code = (
        "import sys; from tether.cli import build_parser; build_parser(verb='check'); "
        "print(sorted(m for m in ('tether.bench.sweep', 'pytest', 'tether.verify') "
        "if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TETHER_ROOT"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout  # fmt: skip
    assert out.strip() == "[]", out


def test_a_closed_pipe_ends_quietly() -> None:
    """`tether store ls | head`: the reader is gone before tether writes; no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_ROOT"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "store", "ls"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away at once, as `head -0` would
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_broken_toml_is_named_not_read_as_no_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.tether\nstore = 1\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TETHER_ROOT"}
    done = subprocess.run(
        [sys.executable, "-m", "tether", "check"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "pyproject.toml: not valid TOML" in done.stderr, done.stderr
    assert "not inside a tether project" not in done.stderr


def test_an_unknown_plugin_module_is_named(tmp_path: Path) -> None:
    root = fixture_project(tmp_path, plugins=["benchmark.no_such_module"], headline=None)
    rc, _, err = run_cli(root, "sweep", "--list")
    assert rc == 2 and "plugin module 'benchmark.no_such_module'" in err, err


def test_an_unknown_headline_sweep_is_named(tmp_path: Path) -> None:
    root = fixture_project(tmp_path, plugins=["tether_kernels_plugin"], headline="prefil-vs-sdpa")
    rc, _, err = run_cli(root, "sweep", "--list")
    assert rc == 2 and "headline 'prefil-vs-sdpa' is not a registered sweep" in err, err
    assert "prefill-vs-sdpa" in err  # the registered names, so the typo is plain


def test_a_store_typo_is_not_answered_with_git_checkout(tmp_path: Path) -> None:
    root = fixture_project(tmp_path, files={}, headline=None, doc_arches=())
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    (root / "pyproject.toml").write_text(text.replace('"results"', '"result"'), encoding="utf-8")
    (root / "docs" / "figures").mkdir(parents=True)
    (root / "docs" / "figures" / "sm90-x.svg").write_text("<svg/>", encoding="utf-8")
    (root / "docs_src").mkdir()
    rc, _, err = run_cli(root, "render")
    assert rc == 2 and "'result' ([tool.tether] store in pyproject.toml) does not exist" in err
    assert "git checkout" not in err


def test_check_names_a_plugin_typo_without_importing_it(tmp_path: Path) -> None:
    root = fixture_project(
        tmp_path, plugins=["tether_kernels_plugin", "benchmark.tether_bnch"], files={},
        figures=None, headline=None,
    )  # fmt: skip
    (root / "docs_src").mkdir()
    (root / "benchmark").mkdir()
    (root / "benchmark" / "tether_bench.py").write_text("raise SystemExit(3)\n", encoding="utf-8")
    rc, out, _ = run_cli(root, "check")
    assert rc == 1 and "module 'benchmark.tether_bnch' not found" in out, out
    assert "tether_kernels_plugin" not in out
    # Reported at the line that names it, where the maintainer fixes it.
    lines = (root / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    (line,) = [n for n, text in enumerate(lines, 1) if '"benchmark.tether_bnch"' in text]
    assert line > 1 and f"pyproject.toml:{line}: [tool.tether] plugins" in out, out
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    (root / "pyproject.toml").write_text(text.replace("tether_bnch", "tether_bench"), "utf-8")
    rc, out, _ = run_cli(root, "check")
    assert rc == 0, out  # found, and never imported (importing it would exit)


# -- a --store that does not exist is an error for every verb that reads ----------------------


@pytest.mark.parametrize(
    "verb",
    [
        pytest.param(["store", "ls"], id="store-ls"),
        pytest.param(["store", "show", "x"], id="store-show"),
        pytest.param(["store", "validate"], id="store-validate"),
        pytest.param(["render"], id="render"),
        pytest.param(["check"], id="check"),
        pytest.param(["compare", "a", "b"], id="compare"),
    ],
)
def test_missing_store_is_a_usage_error(project: Path, tmp_path: Path, verb: list[str]) -> None:
    typo = tmp_path / "resluts"
    rc, _, err = run_cli(project, "--store", str(typo), *verb)
    assert rc == 2 and f"--store {typo}: does not exist" in err
    assert not typo.exists()


def test_global_options_work_after_the_verb(project: Path, tmp_path: Path) -> None:
    runs = make_fixture_store(tmp_path / "elsewhere")
    before = run_cli(project, "--store", str(tmp_path / "elsewhere"), "store", "ls")
    after = main(
        ["store", "ls", "--root", str(project), "--store", str(tmp_path / "elsewhere")],
        out=(out := io.StringIO()),
        err=io.StringIO(),
    )
    assert before[0] == after == 0 and before[1] == out.getvalue()
    assert all(r.id in out.getvalue() for r in runs)


def test_check_json_lists_findings(project: Path) -> None:
    (project / "results" / "sm90").mkdir(parents=True)
    (project / "results" / "sm90" / "bad.json").write_text("{", encoding="utf-8")
    (project / "results" / "sm90" / "worse.json").write_text("[", encoding="utf-8")
    rc, out, _ = run_cli(project, "check", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["clean"] is False
    paths = {f["path"] for f in doc["findings"]}
    assert {"results/sm90/bad.json", "results/sm90/worse.json"} <= paths


# -- help written for users --------------------------------------------------------------------

MY_VERBS = ("guard", "verify", "store", "compare", "render", "check", "demo")


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_of_these_verbs_has_help() -> None:
    missing = []
    for path, parser in _parsers(build_parser()):
        if not path or path[0] not in MY_VERBS:
            continue
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(
                    f"tether {' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
                )
    assert not missing, f"options without help: {missing}"
