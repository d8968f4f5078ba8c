"""``tether verify``: the whole validation suite under the guard, recorded as a verify run.

The OK line is the last line printed and only when nothing failed or errored and something
passed: an empty or fully skipped suite is not a pass. The suite's routed public-API cases,
counted by arm (tether.pytest_plugin's ``routed_case``), are recorded as ``routed_cases``.

A command that uses the guard (it holds the host for the suite), so it lives above it: the
guard package imports nothing above ``tether.store``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tether import project
from tether.bench.sweep import record_of
from tether.errors import RunFileError, UsageError, WrongVendorError
from tether.gpus import visible_gpus
from tether.guard import devinfo
from tether.guard.api import HostUnavailable
from tether.guard.hold import run_held, safe_reason, write_not_measured
from tether.guard.idle import detect_vendor
from tether.pytest_plugin import FAILURES_ENV, SUMMARY_ENV, read_failures, read_routed_summary
from tether.store import GuardRecord, new_run, write_run
from tether.store.results import VerifyResults
from tether.store.signing import configured_signer, sign_written

VENDORS = ("auto", "cuda", "rocm")
DEFAULT_SUITE = "validate"


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


# pytest arguments that select part of the suite: a run with any of them is partial, and a
# partial run never becomes the documents' "Tested" line as if it were the whole suite.
_SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--ff", "-x", "--exitfirst",
              "--maxfail", "--sw", "--stepwise")  # fmt: skip


def is_complete(suite: str, default_suite: str, extra: Sequence[str]) -> bool:
    """Whether ``extra`` pytest arguments leave the whole suite selected."""
    if suite != default_suite:
        return False
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name in _SELECTING or (not arg.startswith("-") and arg != "--"):
            return False  # an option that selects, or a path / node id
    return True


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


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``name=value`` for the child the guard starts (it copies this process's environment)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def routed_cases(path: Path) -> dict[str, int] | None:
    """The suite's routed-case counts by arm; None when the suite wrote none (it died)."""

    if not path.exists():
        return None
    try:
        return read_routed_summary(path)
    except ValueError as exc:
        raise RunFileError(path, "routed_cases", str(exc)) from exc


MAX_PRINTED_FAILURES = 50


def failures_seen(path: Path) -> list[dict[str, str]]:
    """The failures the suite reported as they happened (tether.pytest_plugin.FailureLog)."""
    try:
        return read_failures(path)
    except ValueError as exc:
        raise RunFileError(path, "failures", str(exc)) from exc


def failure_id(failure: dict[str, str]) -> str:
    """A failed test's node id, with its phase when that is not the test itself (``setup``,
    ``teardown``: an error rather than a failure)."""
    when = failure["when"]
    return failure["nodeid"] if when == "call" else f"{failure['nodeid']} [{when}]"


def record_wrong_vendor(
    exc: WrongVendorError, requested: str, suite: str, store: Path, root: Path
) -> Path:
    """Record a verify that could not run here (no GPU of the vendor asked for) as a
    not_measured run with its reason, under this host's own arch; returns its path."""

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
        guard=GuardRecord(mode="unguarded", reason="nothing ran: " + safe_reason(str(exc))),
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
    off_target_store: Path | None = None,
    workers: int | None = None,
) -> int:
    """Run the suite under the guard, record the verify run, print the verdict line last.

    ``off_target_store``: where the run goes when this host has no GPU (it is no verify
    host, so its run is not evidence for the project's store); None keeps ``store``. A verify
    for a vendor this host has no GPU of runs nothing: a not_measured run says why (written
    there too, so a refusal never lands in the committed store unasked), and
    WrongVendorError (exit 77) carries the message.
    ``workers``: pytest-xdist processes; None means one per GPU this process may use (the
    visibility variables count, so ``CUDA_VISIBLE_DEVICES=0`` verifies on GPU 0 alone).
    More workers than GPUs share them round-robin: Triton's compiles are CPU-bound.
    """
    try:
        resolved = resolve_vendor(vendor)
    except WrongVendorError as exc:
        target = off_target_store if off_target_store is not None else store
        path = record_wrong_vendor(exc, vendor, suite, target, root)
        print(f"[verify-{vendor}] NOT MEASURED: {exc} (recorded {path})", file=out)
        raise
    vendor = resolved
    configured_signer()  # a signing key set wrongly is said before the suite runs
    if vendor == "cpu" and off_target_store is not None:
        store = off_target_store
        print(f"[verify-cpu] no GPU on this host: the run goes to {store}", file=err)
    arch, device, driver = devinfo.device_info(vendor)

    gpus = visible_gpus() if vendor != "cpu" else 0
    if workers is not None and workers < 1:
        raise UsageError(f"verify --workers: must be >= 1, got {workers}")
    workers = workers if workers is not None else max(1, gpus)
    tag = f"verify-{vendor}"
    with tempfile.TemporaryDirectory(prefix="tether-verify-") as tmp:
        junit = Path(tmp) / "junit.xml"
        summary = Path(tmp) / "summary.json"
        failures_log = Path(tmp) / "failures.jsonl"
        cmd = pytest_command(suite, junit, workers, extra)
        started = time.time()
        try:
            with _environ(SUMMARY_ENV, str(summary)), _environ(FAILURES_ENV, str(failures_log)):
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
            if isinstance(exc, HostUnavailable):
                path = write_not_measured(exc, store, root, name=tag)
                print(f"[{tag}] NOT MEASURED: {exc} (recorded {path})", file=out)
            raise
        duration = time.time() - started
        counts = parse_junit(junit) if junit.exists() else None
        routed = routed_cases(summary)
        failures = failures_seen(failures_log)
    ended = time.time()
    # A nonzero exit with no failure to show for it is a suite that stopped early: pytest
    # writes its junit xml when interrupted (SIGINT), with only the tests run until then, which
    # alone would read as a clean pass.
    clean = counts is not None and counts.failed == counts.errors == 0
    stopped = rc != 0 and (counts is None or clean)
    ok = clean and rc == 0 and counts is not None and counts.passed > 0
    complete = is_complete(suite, DEFAULT_SUITE, extra)
    summary_of_run = VerifyResults(
        passed=counts.passed if counts else 0,
        # Cut off before its summary: the failures reported until then.
        failed=counts.failed if counts else len(failures),
        skipped=counts.skipped if counts else 0,
        errors=counts.errors if counts else 1,
        duration_s=round(duration, 3),
        suite=suite,
        vendor=vendor,
        workers=workers,
        gpus=gpus,
        complete=complete,
        selection=tuple(str(a) for a in extra),
        routed_cases=routed,
        failures=tuple(failure_id(f) for f in failures) or None,
        stopped=True if stopped else None,
    )
    results = summary_of_run.to_json()

    status = "ok" if ok else "rejected"
    reason = (
        None
        if ok
        else f"pytest exit status {rc}; no junit xml (stopped before its summary), "
        f"{len(failures)} failure(s) reported until then"
        if counts is None
        else f"pytest exit status {rc}: stopped before the end of the suite, "
        f"{results['passed']} passed until then"
        if stopped
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
        guard=record_of(evidence),
        results=results,
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        root=root,
    )
    path = write_run(run, store)
    sign_written(path, run.digest, project.get(root).allowed_signers)
    for f in failures[:MAX_PRINTED_FAILURES]:
        first = (f["message"].splitlines() or [""])[0]
        print(f"[{tag}] failed: {f['nodeid']} ({f['when']}): {first}", file=out)
    if len(failures) > MAX_PRINTED_FAILURES:
        print(f"[{tag}] ... and {len(failures) - MAX_PRINTED_FAILURES} more failure(s)", file=out)
    if routed:
        by_arm = ", ".join(f"{arm} {n}" for arm, n in sorted(routed.items()))
        print(f"[{tag}] routed public-API cases by arm: {by_arm}", file=out)
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
