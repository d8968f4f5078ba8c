"""Every failure is a TetherError with its own exit code, and no traceback (issue 25 item 5).

FIXTURE projects in tmp_path are driven through the CLI in-process; each test provokes one
failure (a full or unwritable store, a system refusal mid-write, a template that raises while
rendering, a run file with a 5000-digit integer) and asserts the exit code, that the message
names the file and the cause, and that no traceback is printed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from tether.errors import EXIT_CODES, OSFailure, exit_code_for

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text


def test_codes_are_distinct_from_drift() -> None:
    codes = {cls.__name__: code for cls, code in EXIT_CODES}
    assert codes["OSFailure"] == 74 and codes["TetherError"] == 1
    assert exit_code_for(OSFailure("x", "write it", "No space left on device")) == 74


def _project(tmp_path: Path) -> Path:
    root = fixture_project(tmp_path / "repo", plugins=["tether_kernels_plugin"])
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    return root


def test_a_store_that_cannot_be_written_is_refused_before_the_host_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.guard import api

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the host was held although the store cannot take the run")

    monkeypatch.setattr(api, "acquire", never)
    root = _project(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("FIXTURE: a file where the store should be\n", encoding="utf-8")
    rc, out, err = run_cli(root, "--store", str(blocker / "store"), "sweep", "cpu-demo")
    assert rc == 74, out + err
    assert str(blocker) in err and "cannot create the results store folder" in err
    _no_traceback(out + err)


def test_a_full_store_is_refused_before_the_host_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.guard import api
    from tether.store import io as store_io

    monkeypatch.setattr(api, "acquire", lambda *a, **k: pytest.fail("host held"))
    real = os.statvfs

    class Full:
        def __init__(self, path: str) -> None:
            st = real(path)
            self.f_frsize, self.f_bavail = st.f_frsize, 1

    monkeypatch.setattr(store_io.os, "statvfs", Full)
    root = _project(tmp_path)
    rc, out, err = run_cli(root, "sweep", "cpu-demo")
    assert rc == 74, out + err
    assert "KiB free" in err and str(root / "results") in err
    assert not list((root / "results").glob(".preflight.*"))  # the probe is removed
    _no_traceback(out + err)


def test_an_os_refusal_mid_write_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path)
    make_sweep_run(store=root / "results", root=root)

    real_replace = os.replace

    def full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(os, "replace", full)
    rc, out, err = run_cli(root, "render")
    monkeypatch.setattr(os, "replace", real_replace)
    assert rc == 74, out + err
    assert "No space left on device" in err and str(root) in err
    _no_traceback(out + err)


def test_a_template_that_raises_while_rendering_is_named(tmp_path: Path) -> None:
    root = _project(tmp_path)
    template = root / "docs_src" / "README.md.j2"
    template.write_text(
        template.read_text(encoding="utf-8") + "\n{{ arches | length // 0 }}\n", encoding="utf-8"
    )
    rc, out, err = run_cli(root, "render")
    assert rc not in (0, 1), out + err
    assert "README.md.j2" in err and "ZeroDivisionError" in err
    _no_traceback(out + err)
    # --debug shows the traceback instead.
    with pytest.raises(ZeroDivisionError):
        run_cli(root, "--debug", "render")


def test_a_5000_digit_integer_is_a_run_file_error(tmp_path: Path) -> None:
    root = _project(tmp_path)
    run = make_sweep_run(store=root / "results", root=root)
    assert run.path is not None
    data = json.loads(run.path.read_text(encoding="utf-8"))
    text = json.dumps(data).replace('"work": ', '"work": ' + "9" * 5000 + ', "x": ', 1)
    run.path.write_text(text, encoding="utf-8")
    rc, out, err = run_cli(root, "store", "show", run.id)
    assert rc == 1, out + err
    assert run.path.name in err and "5000 digits" in err
    _no_traceback(out + err)
    rc, out, _ = run_cli(root, "store", "validate")
    assert rc == 1 and "5000 digits" in out
