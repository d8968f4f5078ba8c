"""Signed evidence, required (issue 47 item 2): under ``[tool.tether.signing] require = true``
a run that is not signed by an allowed signer reaches no document, threshold or gate, and the
runs set aside as legacy (``tether legacy``) are never cited; hosts sign as they write.

The FIXTURE checkout is test_check's (the real templates and policy files, a live threshold
and a gate set between two runs, in a store beside the checkout), with every run signed by a
throwaway host key made here and require turned on. Three forgeries are made of a signed run,
each newer than it: re-sealed with a fresh digest and no signature, signed by a key the
allowed-signers file does not list, and carrying the signature copied from the run it was
made from. Each is tried against every surface: the render (with its control: without
require the forgery is cited), the check, a gate and a policy threshold, and a forged compile
run against ``tether compile``'s choice of the run its compile gate judges. A tuning run's
region whose run is set aside says why, and the signing page counts the whole store.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from tether.bench.sweep import Target
from tether.render import cited_context, render_all
from tether.store import Run, load_store, write_run
from tether.store.evidence import LEGACY_SCHEMA, load_legacy, signing_summary
from tether.store.signing import ENV_KEY, ENV_PRINCIPAL, NAMESPACE, sidecar, verify_run
from tether_kernels import gates, policy

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run, resealed
from validate.suite.signing_keys import keypair, require_ssh_keygen, sign_with
from validate.suite.test_check import (  # noqa: F401 (checkout: the fixture, used by name)
    POLICY_REGION,
    Checkout,
    _render_into,
    checkout,
    fixture_gates,
)

HOST = "fixture-host"
FORGERIES = ("resealed", "unknown-key", "copied-signature")

require_ssh_keygen()


def _allow(root: Path, key: Path, require: bool = True) -> None:
    """FIXTURE: ``key`` as the project's one allowed signer, and require set."""
    public = key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2]
    (root / "ci").mkdir(exist_ok=True)
    (root / "ci" / "allowed_signers").write_text(
        f'{HOST} namespaces="{NAMESPACE}" {" ".join(public)}\n', encoding="utf-8"
    )
    config = root / "pyproject.toml"
    text = config.read_text(encoding="utf-8").split("[tool.tether.signing]")[0]
    config.write_text(
        text + "[tool.tether.signing]\n"
        'allowed_signers = "ci/allowed_signers"\n'
        f"require = {'true' if require else 'false'}\n",
        encoding="utf-8",
    )
    stat = config.stat()  # a new stamp: the cached project is read again
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


class Signed:
    """The signed FIXTURE checkout and its keys."""

    def __init__(self, co: Checkout, host: Path, forger: Path) -> None:
        self.co, self.host, self.forger = co, host, forger

    def cli(self, *argv: str) -> tuple[int, str, str]:
        return run_cli(self.co.root, "--store", str(self.co.store), *argv)

    def check(self) -> tuple[int, str]:
        rc, out, err = self.cli("check", "--worktree")
        return rc, out + err

    def forge(self, kind: str, run: Run, day: str, signed_from: Run | None = None) -> Run:
        """A forgery of ``run``: its B samples halved, dated ``day``, re-sealed with
        tether's own function under a new id, then signed as ``kind`` says (a copied
        signature is ``signed_from``'s, by default ``run``'s)."""
        cells = tuple(
            replace(c, samples={**c.samples, "B": tuple(x / 2 for x in c.samples["B"])})
            for c in run.cells
        )
        stamp = {"started": f"{day}T00:00:00Z", "ended": f"{day}T01:00:00Z"}
        forged = resealed(run, cells=cells, provenance=stamp)
        forged = replace(forged, path=write_run(forged, self.co.store))
        source = (signed_from or run).path
        assert forged.path is not None and source is not None
        if kind == "unknown-key":
            sign_with(self.forger, forged)
        elif kind == "copied-signature":
            shutil.copyfile(sidecar(source), sidecar(forged.path))
        return forged


@pytest.fixture
def signed(checkout: Checkout, tmp_path: Path) -> Signed:  # noqa: F811 (the imported fixture)
    keys = tmp_path / "keys"
    keys.mkdir()
    host, forger = keypair(keys, "host"), keypair(keys, "forger")
    _allow(checkout.root, host)
    made = Signed(checkout, host, forger)
    rc, out, err = made.cli("sign", "--key", str(host), "--principal", HOST, "--unsigned")
    assert rc == 0, out + err
    _render_into(checkout.root, checkout.store)  # the docs show the signatures
    rc, said = made.check()
    assert rc == 0, f"FIXTURE signed checkout is not clean:\n{said}"
    return made


WHY = {
    "resealed": "is unsigned",
    "unknown-key": "does not allow",
    "copied-signature": "does not match its digest",
}


@pytest.mark.parametrize("kind", FORGERIES)
def test_render_cites_no_forgery(signed: Signed, kind: str) -> None:
    before = render_all(signed.co.root, signed.co.store)
    forged = signed.forge(kind, signed.co.sweep, "2026-02-01")
    after = render_all(signed.co.root, signed.co.store)
    assert after == before  # the newer forgery changes no byte of any document
    assert all(forged.id.encode() not in text for text in after.values())
    # The control: without require the same store renders the forgery (it is the newest run).
    _allow(signed.co.root, signed.host, require=False)
    cited = render_all(signed.co.root, signed.co.store)
    assert any(forged.id.encode() in text for text in cited.values())


@pytest.mark.parametrize("kind", FORGERIES)
def test_check_names_a_forgery_in_the_store(signed: Signed, kind: str) -> None:
    forged = signed.forge(kind, signed.co.sweep, "2026-02-01")
    rc, said = signed.check()
    assert rc == 1
    line = next(x for x in said.splitlines() if forged.id in x and "signed evidence" in x)
    assert WHY[kind] in line, line


@pytest.mark.parametrize("kind", FORGERIES)
def test_check_fails_a_document_citing_a_forgery(signed: Signed, kind: str) -> None:
    # Docs rendered by someone who turned require off to cite the forgery: the check, with
    # require on, renders without it and the documents differ.
    forged = signed.forge(kind, signed.co.sweep, "2026-02-01")
    _allow(signed.co.root, signed.host, require=False)
    _render_into(signed.co.root, signed.co.store)
    citing = sorted(
        rel.as_posix()
        for rel, text in render_all(signed.co.root, signed.co.store).items()
        if forged.id.encode() in text
    )
    assert citing, "FIXTURE: without require the forgery is cited"
    _allow(signed.co.root, signed.host, require=True)
    rc, said = signed.check()
    assert rc == 1
    for rel in citing:
        assert f"{rel}:" in said and "differs from what" in said, said


@pytest.mark.parametrize("kind", FORGERIES)
def test_a_gate_resting_on_a_forgery_fails(
    signed: Signed, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = signed.forge(kind, signed.co.after, "2026-01-03")
    monkeypatch.setattr(gates, "GATES", fixture_gates(150e12, signed.co.before.id, forged.id))
    rc, said = signed.check()
    assert rc == 1
    line = next(x for x in said.splitlines() if "gate fixture-gate: after run" in x)
    assert forged.id in line and WHY[kind] in line and "signed evidence is required" in line


@pytest.mark.parametrize("kind", FORGERIES)
def test_a_threshold_resting_on_forgeries_fails(
    signed: Signed, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The live threshold cites a sweep whose only runs are forgeries (two, a replicate pair):
    # under require it rests on nothing. Signed by the host, the same runs would hold it.
    name = "forged-sweep"
    made = [
        signed.forge(kind, resealed(run, name=name), day, signed_from=run)
        for run, day in ((signed.co.sweep, "2026-02-01"), (signed.co.replicate, "2026-01-31"))
    ]
    live = [th for th in policy.POLICY if th.region == POLICY_REGION]
    evidence = replace(live[0].evidence, sweep=name)
    monkeypatch.setattr(
        policy,
        "POLICY",
        tuple(
            replace(th, evidence=evidence) if th.region == POLICY_REGION else th
            for th in policy.POLICY
        ),
    )
    rc, said = signed.check()
    assert rc == 1
    assert f"rests on sweep {name!r} with no guarded ok run" in said
    for run in made:  # the control: signed by the allowed host, they are evidence
        assert run.path is not None
        sidecar(run.path).unlink(missing_ok=True)
        sign_with(signed.host, run)
    _, said = signed.check()
    assert f"rests on sweep {name!r}" not in said


def test_legacy_runs_are_recorded_and_never_cited(signed: Signed) -> None:
    old = make_sweep_run(
        name=signed.co.sweep.name, started="2026-03-01T00:00:00Z", store=signed.co.store,
        axes={"seqlen": [2048, 4096]}, fixed=dict(signed.co.sweep.config["grid"]["fixed"]),
        seed=9, root=signed.co.root,
    )  # fmt: skip
    rc, said = signed.check()
    assert rc == 1 and f"run {old.id} is unsigned" in said  # neither signed nor legacy
    rc, out, err = signed.cli("legacy", "--reason", "FIXTURE: measured before signing")
    assert rc == 0, out + err
    assert out.split() == ["legacy:", old.id]  # the one unsigned run; signed ones never
    entry = load_legacy(signed.co.root / ".tether" / "legacy_runs.toml")[old.id]
    assert entry.digest == old.digest and entry.reason == "FIXTURE: measured before signing"
    assert entry.by and entry.recorded and entry.file.endswith(f"{old.id}.json")
    text = (signed.co.root / ".tether" / "legacy_runs.toml").read_text(encoding="utf-8")
    assert f'schema = "{LEGACY_SCHEMA}"' in text
    rc, said = signed.check()
    assert rc == 0, said  # recorded: no finding, and the newer legacy run is not cited
    assert old.id not in (signed.co.root / "README.md").read_text(encoding="utf-8")
    # Recorded once: a second pass adds nothing.
    rc, out, _ = signed.cli("legacy")
    assert rc == 0 and out == ""
    # An entry holds for the digest it records, not for another run given that id.
    path = signed.co.root / ".tether" / "legacy_runs.toml"
    path.write_text(text.replace(old.digest, "sha256:" + "0" * 64), encoding="utf-8")
    rc, said = signed.check()
    assert rc == 1 and f"run {old.id} is unsigned" in said


def test_without_require_nothing_is_filtered(signed: Signed) -> None:
    forged = signed.forge("resealed", signed.co.sweep, "2026-02-01")
    _allow(signed.co.root, signed.host, require=False)
    texts = render_all(signed.co.root, signed.co.store)
    assert any(forged.id.encode() in text for text in texts.values())


# -- a host signs as it writes (TETHER_SIGNING_KEY) -------------------------------------------


@pytest.fixture
def signing_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    root = fixture_project(tmp_path / "repo", plugins=["tether_kernels_plugin"], headline=None)
    keys = tmp_path / "keys"
    keys.mkdir()
    key = keypair(keys, "host")
    _allow(root, key)
    monkeypatch.setenv(ENV_KEY, str(key))
    monkeypatch.setenv(ENV_PRINCIPAL, HOST)
    return root, key


@pytest.mark.usefixtures("private_guard")
def test_a_cpu_sweep_is_signed_as_it_is_written(
    signing_project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether import registry
    from tether.bench.engine import TimingPolicy

    root, _ = signing_project
    # The CPU on every host: on a GPU host the suite's other workers keep the GPUs busy, and a
    # guard judging them would wait its whole limit and record the sweep not measured. Hiding
    # the GPUs from this process is not enough (the guard's NVML and nvidia-smi probes see
    # every device: the H100 verify of 2026-12-07 waited on the other workers), so the sweep's
    # target is the CPU, as the demo's end-to-end test sets it.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    cpu = Target("cpu", "cpu", "cpu: test fixture")
    monkeypatch.setattr(Target, "detect", staticmethod(lambda index=None: cpu))
    reg = registry.load(["tether_kernels_plugin"])
    toy = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
    monkeypatch.setitem(reg.sweeps, "cpu-demo", reg.get_sweep("cpu-demo").replace(timing=toy))
    rc, out, err = run_cli(root, "sweep", "cpu-demo", "--no-progress")
    assert rc == 0, out + err
    (run,) = load_store(root / "results")
    assert run.path is not None
    verdict = verify_run(run.path, run.digest, root / "ci" / "allowed_signers")
    assert verdict.ok and verdict.principals == (HOST,), verdict.why


def test_tether_compile_signs_its_run(
    signing_project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether_kernels_plugin import compile as engine

    from validate.suite.test_compile_runs import fixture_cell, fixture_run

    root, _ = signing_project
    monkeypatch.setattr(engine, "compile_arch", lambda *a, **k: fixture_run([fixture_cell()]))
    rc, out, err = run_cli(root, "compile", "--arch", "gfx942", "--force")
    assert rc == 0, out + err
    (run,) = load_store(root / "results")
    assert run.path is not None and f"signed {sidecar(run.path)}" in out
    assert verify_run(run.path, run.digest, root / "ci" / "allowed_signers").ok


@pytest.mark.usefixtures("private_guard")
def test_a_signing_key_set_wrongly_is_refused_before_measuring(
    signing_project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = signing_project
    monkeypatch.delenv(ENV_PRINCIPAL)
    rc, out, err = run_cli(root, "sweep", "cpu-demo", "--no-progress")
    assert rc == 1 and ENV_PRINCIPAL in err, out + err
    assert not (root / "results").exists() or not load_store(root / "results")


def test_the_signing_page_states_the_store_as_it_is(signed: Signed) -> None:
    runs = load_store(signed.co.store)
    summary = signing_summary(signed.co.root, runs)
    assert summary["require"] is True and summary["principals"] == [HOST]
    assert summary["unsigned"] == 0 and summary["by_signer"] == [(HOST, len(runs))]
    signed.forge("unknown-key", signed.co.sweep, "2026-02-01")
    signed.forge("resealed", signed.co.sweep, "2026-02-02")
    summary = signing_summary(signed.co.root, load_store(signed.co.store))
    assert summary["unsigned"] == 1
    (stranger,) = [who for who, _ in summary["by_signer"] if who != HOST]
    assert stranger.startswith("a key not listed (ED25519 SHA256:")
    # The page is rendered from the whole store, not from the runs the documents may cite
    # (under require those are all signed, and the page would say 0 unsigned).
    page = cited_context(signed.co.root, signed.co.store)["signing"]
    assert page["runs"] == len(runs) + 2 and page["unsigned"] == 1


# -- a tuning run's region (tune-<id>) whose run is set aside ---------------------------------


def _cite_tune_run(signed: Signed, run_id: str) -> Path:
    """FIXTURE: a hand-written notes file, declared as a region file, citing ``run_id``."""
    notes = signed.co.root / "NOTES.md"
    notes.write_text(
        f"# Notes\n\n<!-- BEGIN GENERATED: tune-{run_id} (tether render) -->\n"
        f"<!-- END GENERATED: tune-{run_id} -->\n",
        encoding="utf-8",
    )
    config = signed.co.root / "pyproject.toml"
    text = config.read_text(encoding="utf-8")
    assert "\nregions = [" in text
    config.write_text(text.replace("\nregions = [", '\nregions = ["NOTES.md", ', 1), "utf-8")
    stat = config.stat()  # a new stamp: the cached project is read again
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    return notes


def test_a_tuning_region_citing_a_set_aside_run_says_why(signed: Signed) -> None:
    # An unsigned tuning run: the region says why it cites nothing, and the check fails it.
    stamp = {"started": "2026-02-01T00:00:00Z", "ended": "2026-02-01T01:00:00Z"}
    tune = resealed(signed.co.sweep, kind="tune", name="tune-fixture", provenance=stamp)
    tune = replace(tune, path=write_run(tune, signed.co.store))
    notes = _cite_tune_run(signed, tune.id)
    _render_into(signed.co.root, signed.co.store)
    assert f"Run `{tune.id}` is not cited: it is unsigned" in notes.read_text(encoding="utf-8")
    rc, said = signed.check()
    assert rc == 1
    assert f"cites tuning run {tune.id!r}, which is unsigned; signed evidence is required" in said
    # Recorded as legacy: the region says so, and, as for any legacy run, nothing is a finding.
    rc, out, err = signed.cli("legacy", "--reason", "FIXTURE: measured before signing")
    assert rc == 0 and out.split() == ["legacy:", tune.id], out + err
    _render_into(signed.co.root, signed.co.store)
    body = notes.read_text(encoding="utf-8")
    assert f"Run `{tune.id}` is not cited: it is recorded as legacy in" in body
    rc, said = signed.check()
    assert rc == 0, said
    # A run the store does not hold at all is still a finding.
    notes.write_text(body.replace(tune.id, "20990101T000000Z-tune-nothing-sm90-000000000000"))
    _render_into(signed.co.root, signed.co.store)
    rc, said = signed.check()
    assert rc == 1 and "not in the store" in said


# -- tether compile and the compile gates judge only signed compile runs ----------------------


def _compile_run(root: Path, day: str, spills: int) -> Run:
    """FIXTURE: a compile run of this FIXTURE checkout's kernel sources by the installed
    compiler, dated ``day``, its one variant spilling ``spills`` registers; written, unsigned."""
    from tether.store import kernels_fingerprint
    from tether_kernels_plugin import compile as engine

    from validate.suite.test_compile_runs import fixture_cell, fixture_run

    version = engine.compile_key(root)["compiler"].split(" ", 1)[1]
    made = fixture_run([fixture_cell(spills=spills)], compiler_version=version)
    stamp = {"started": f"{day}T00:00:00Z", "ended": f"{day}T00:01:00Z"}
    run = resealed(made, provenance={**stamp, "kernels_fingerprint": kernels_fingerprint(root)})
    return replace(run, path=write_run(run, root / "results"))


@pytest.mark.parametrize("kind", FORGERIES)
def test_tether_compile_judges_the_signed_run_not_a_forgery(
    signing_project: tuple[Path, Path], kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `tether compile` (and validate/gates, through the same rule) judges the compile gate on
    # the newest fresh compile run it may cite: the signed run, which spills, not a newer
    # forgery of it that says it does not.
    from tether_kernels_plugin import compile as engine

    root, key = signing_project
    honest = _compile_run(root, "2026-01-01", spills=2)
    sign_with(key, honest)
    forged = resealed(
        honest,
        cells=tuple(replace(c, extra={**c.extra, "spills": 0}) for c in honest.cells),
        results={**honest.results, "spills_total": 0, "variants_spilling": 0},
        provenance={"started": "2026-01-02T00:00:00Z", "ended": "2026-01-02T00:01:00Z"},
    )
    forged = replace(forged, path=write_run(forged, root / "results"))
    assert forged.path is not None and honest.path is not None
    if kind == "unknown-key":
        forger = keypair(tmp_path / "keys", "forger")
        sign_with(forger, forged)
    elif kind == "copied-signature":
        shutil.copyfile(sidecar(honest.path), sidecar(forged.path))

    def no_compile(*_a: object, **_k: object) -> None:
        raise AssertionError("compiled although the store holds a fresh signed run")

    monkeypatch.setattr(engine, "compile_arch", no_compile)
    rc, out, err = run_cli(root, "compile", "--arch", "gfx942")
    assert rc == 0, out + err
    assert f"up to date, {honest.id}" in out and forged.id not in out
    # The control: without require the forgery is the newest fresh run, and it is judged.
    _allow(root, key, require=False)
    rc, out, err = run_cli(root, "compile", "--arch", "gfx942")
    assert rc == 0 and f"up to date, {forged.id}" in out, out + err


def test_tether_compile_makes_a_signed_run_where_only_an_unsigned_one_is_fresh(
    signing_project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under require an unsigned compile run is not evidence: `tether compile` compiles (and
    # signs) rather than call the store up to date with it.
    from tether_kernels_plugin import compile as engine

    root, _ = signing_project
    unsigned = _compile_run(root, "2026-01-01", spills=0)
    made = _compile_run(root, "2026-01-02", spills=0)  # what the compiler returns, below
    assert made.path is not None
    made.path.unlink()
    monkeypatch.setattr(engine, "compile_arch", lambda *a, **k: replace(made, path=None))
    rc, out, err = run_cli(root, "compile", "--arch", "gfx942")
    assert rc == 0, out + err
    assert f"up to date, {unsigned.id}" not in out and f"signed {sidecar(made.path)}" in out
