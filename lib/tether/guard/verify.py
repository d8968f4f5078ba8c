"""``tether verify``: the whole validation suite under the guard, recorded as a verify run.

The OK line is the last line printed and only when nothing failed or errored and something
passed: an empty or fully skipped suite is not a pass.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.errors import RunFileError, UsageError, WrongVendorError
from tether.guard import devinfo
from tether.guard.hold import run_held
from tether.guard.idle import detect_vendor

VENDORS = ("auto", "cuda", "rocm")


@dataclass
class JUnitCounts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0


def parse_junit(path: Path) -> JUnitCounts:
    """Totals over every <testsuite> in a pytest junit xml file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise RunFileError(path, "junitxml", f"cannot read: {exc}") from exc
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise RunFileError(path, "junitxml", "no <testsuite> element")
    counts = JUnitCounts()
    for s in suites:
        try:
            tests, fail, err, skip = (
                int(s.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")
            )
        except ValueError as exc:
            raise RunFileError(path, "testsuite", f"non-numeric count: {exc}") from exc
        counts.failed += fail
        counts.errors += err
        counts.skipped += skip
        counts.passed += tests - fail - err - skip
    return counts


def resolve_vendor(requested: str) -> str:
    """The vendor to verify; a request for the other vendor (or on no GPU) is WrongVendorError."""
    if requested not in VENDORS:
        raise UsageError(f"--vendor {requested!r}: expected one of {', '.join(VENDORS)}")
    found = detect_vendor()
    if requested == "auto":
        return found  # cpu on a host with no GPU: the suite still runs, recorded as vendor cpu
    if found != requested:
        have = "no GPU" if found == "cpu" else f"a {found} GPU"
        raise WrongVendorError(
            f"verify --vendor {requested}: this host has {have}; run `tether verify --vendor {found if found != 'cpu' else 'auto'}` on the right host"
        )
    return requested


def pytest_command(suite: str, junit: Path, workers: int, extra: Sequence[str]) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        suite,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
    ]
    if workers > 1 and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(workers)]
    return [*cmd, *extra]


def record_wrong_vendor(
    exc: WrongVendorError, requested: str, suite: str, store: Path, root: Path
) -> Path:
    """Record a verify that could not run here (no GPU of the vendor asked for) as a
    not_measured run with its reason, under this host's own arch; returns its path."""
    from tether.guard.hold import safe_reason
    from tether.store import new_run, write_run

    found = detect_vendor()
    arch, device, driver = devinfo.device_info(found)
    run = new_run(
        "verify",
        f"verify-{requested}",
        arch=arch,
        device=device,
        driver=driver,
        config={"vendor_requested": requested, "vendor_found": found, "suite": suite},
        status="not_measured",
        reason=safe_reason(str(exc)),
        root=root,
    )
    return write_run(run, store)


def run_verify(
    *,
    vendor: str,
    suite: str,
    wait_s: float,
    extra: Sequence[str],
    store: Path,
    root: Path,
    out: TextIO,
    err: TextIO,
    lock_path: Path | str | None = None,
    refusal_store: Path | None = None,
) -> int:
    """Run the suite under the guard, record the verify run, print the verdict line last.

    On a host without the vendor's GPU nothing runs: a not_measured run says why, written to
    ``refusal_store`` (the CLI passes the project's scratch store unless --store was given,
    so a refusal never lands in the committed store unasked), and WrongVendorError (exit 77)
    carries the message.
    """
    try:
        resolved = resolve_vendor(vendor)
    except WrongVendorError as exc:
        target = refusal_store if refusal_store is not None else store
        path = record_wrong_vendor(exc, vendor, suite, target, root)
        print(f"[verify-{vendor}] NOT MEASURED: {exc} (recorded {path})", file=out)
        raise
    vendor = resolved
    arch, device, driver = devinfo.device_info(vendor)
    workers = max(1, devinfo.gpu_count(vendor))
    tag = f"verify-{vendor}"
    with tempfile.TemporaryDirectory(prefix="tether-verify-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = pytest_command(suite, junit, workers, extra)
        started = time.time()
        try:
            rc, evidence = run_held(
                cmd,
                target=vendor,
                wait_s=wait_s,
                lock_path=lock_path,
                err=err,
                store=None,
                root=root,
            )
        except Exception as exc:
            from tether.guard.api import HostUnavailable
            from tether.guard.hold import write_not_measured

            if isinstance(exc, HostUnavailable):
                path = write_not_measured(exc, store, root, name=tag)
                print(f"[{tag}] NOT MEASURED: {exc} (recorded {path})", file=out)
            raise
        duration = time.time() - started
        counts = parse_junit(junit) if junit.exists() else None
    ok = counts is not None and counts.failed == counts.errors == 0 and counts.passed > 0
    results: dict[str, Any] = {
        "passed": counts.passed if counts else 0,
        "failed": counts.failed if counts else 0,
        "skipped": counts.skipped if counts else 0,
        "errors": counts.errors if counts else 1,
        "duration_s": round(duration, 3),
        "suite": suite,
        "vendor": vendor,
        "workers": workers,
    }
    from tether.store import new_run, write_run

    status = "ok" if ok else "rejected"
    reason = (
        None
        if ok
        else f"pytest exit status {rc}; no junit xml"
        if counts is None
        else (
            f"pytest exit status {rc}: {results['failed']} failed, {results['errors']} errors, {results['passed']} passed"
        )
    )
    run = new_run(
        "verify",
        tag,
        arch=arch,
        device=device,
        driver=driver,
        config={"command": cmd[1:], "extra": list(extra)},
        status=status,
        reason=reason,
        guard=evidence,
        results=results,
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        root=root,
    )
    path = write_run(run, store)
    print(
        f"[{tag}] {results['passed']} passed, {results['failed']} failed, "
        f"{results['skipped']} skipped, {results['errors']} errors; recorded {path}",
        file=out,
    )
    if ok:
        print(f"[{tag}] OK", file=out)
        return 0
    print(f"[{tag}] FAILED", file=out)
    return 1
