"""The arch table, detection, launch configs and the policy table: pure data, no torch on import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tether.errors import UnknownArchError
from tether_kernels import ARCHES, Shape, archs, gates, policy
from tether_kernels.archs import detect_arch, parse_gcn_arch
from tether_kernels.arms import get_arm
from tether_kernels.gates import GATES
from tether_kernels.launch_tables import launch_config
from tether_kernels.policy import POLICY
from tether_kernels.routing import ENTRY_POINTS, policy_choice


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        pytest.param("gfx942:sramecc+:xnack-", "gfx942", id="mi300x"),
        pytest.param("gfx950", "gfx950", id="mi350x"),
        pytest.param("gfx1151", "gfx1151", id="radeon-8060s"),
    ],
)
def test_parse_gcn_arch_strips_features(name: str, arch: str) -> None:
    assert parse_gcn_arch(name) == arch


def test_parse_gcn_arch_rejects_non_gcn() -> None:
    with pytest.raises(UnknownArchError, match="sm_90"):
        parse_gcn_arch("sm_90")


def _fake_torch(
    monkeypatch, *, available: bool, hip: str | None, cap=(9, 0), gcn: str = ""
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(gcnArchName=gcn)
    )


def test_detect_arch(monkeypatch) -> None:
    _fake_torch(monkeypatch, available=False, hip=None)
    assert detect_arch() == "cpu"
    _fake_torch(monkeypatch, available=True, hip=None, cap=(9, 0))
    assert detect_arch() == "sm90"
    _fake_torch(monkeypatch, available=True, hip="6.4", gcn="gfx942:sramecc+:xnack-")
    assert detect_arch() == "gfx942"


def test_detect_arch_names_an_unknown_gpu(monkeypatch) -> None:
    _fake_torch(monkeypatch, available=True, hip=None, cap=(8, 0))
    with pytest.raises(UnknownArchError, match="sm80"):
        detect_arch()
    _fake_torch(monkeypatch, available=True, hip="6.4", gcn="gfx90a:sramecc+:xnack-")
    with pytest.raises(UnknownArchError, match="gfx90a"):
        detect_arch()


def test_importing_the_policy_does_not_import_torch() -> None:
    code = "import sys, tether_kernels, tether_kernels.archs, tether_kernels.launch_tables, tether_kernels.policy, tether_kernels.arms; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES])
def test_launch_configs_are_sane(arch: str) -> None:
    for d in (64, 128):
        cfg = launch_config(arch, d)
        assert cfg.block_m >= 16 and cfg.block_n >= 16
        assert (cfg.waves_per_eu is not None) == (arch in archs.AMD_ARCHES)
        if arch in archs.AMD_ARCHES:
            assert cfg.num_stages in (1, 2)


def _measured_arches() -> set[str]:
    from tether.store import load_store

    # A compile run measures nothing on a device: it does not make an arch measured.
    runs = load_store(Path(__file__).resolve().parents[2] / "results")
    return {run.arch for run in runs if run.kind != "compile"}


def test_policy_is_conservative_and_complete() -> None:
    assert {th.arch for th in POLICY} == {"sm90", "gfx942", "gfx950", "gfx1151"}
    measured = _measured_arches()
    for th in POLICY:
        # tether's own kernels on the arch: the Triton kernel, and the arch's own where it has one.
        assert th.arm in ("triton", archs.OWN_ARM.get(th.arch, "triton"))
        assert th.arm in archs.ARCH_ARMS[th.arch]
        assert th.entry in ("single_prefill", "batch_prefill", "ragged_prefill")
        if th.arch not in measured:
            # tether check evaluates set thresholds against the store; an arch with no runs
            # there can only hold the conservative default.
            assert th.takes is None, f"{th.region}: set without evidence in the store"
        # A ragged batch's otherwise is per_request: its requests one at a time, each routed.
        assert th.otherwise in archs.ARCH_ARMS[th.arch] or (
            th.entry == "ragged_prefill" and th.otherwise == archs.PER_REQUEST
        )
        assert th.evidence.predicates == ("geomean_win", "no_loss_outside_floor")


def test_gate_shapes_are_the_issue_calls() -> None:
    shapes = {gate.id: Shape(**gate.call) for gate in GATES}  # type: ignore[arg-type]
    chunked = shapes["sm90-api-chunked-1k-16k-bf16"]
    assert (chunked.qo_len, chunked.kv_len, chunked.hq, chunked.hkv, chunked.head_dim) == (
        1024,
        16384,
        32,
        8,
        128,
    )
    square = shapes["sm90-api-square-2k-bf16"]
    assert (square.qo_len, square.kv_len, square.hq, square.hkv, square.dtype) == (
        2048,
        2048,
        32,
        8,
        "bf16",
    )
    assert len({g.region for g in GATES}) == len(GATES)
    for gate in GATES:
        # A gate on a public entry point gates what that entry point routes the call to: the
        # routed arm declares it serves the call (whether this host's Triton can run it is not
        # the gate's business: the gate runs on its arch's host).
        arm = (
            policy_choice(gate.arm, shapes[gate.id], gate.arch)
            if gate.arm in ENTRY_POINTS
            else gate.arm
        )
        assert arm is not None, gate.id
        assert get_arm(arm).serves[gate.arch].refusal(shapes[gate.id]) is None
        assert gate.case == "attention" and gate.unit == "FLOP"
        if gate.threshold is not None:
            # A threshold cites the runs it was set from (tether check verifies it sits between).
            assert gate.before_run and gate.after_run


def test_every_region_has_its_markers() -> None:
    text = Path(policy.__file__).read_text(encoding="utf-8")
    text += Path(gates.__file__).read_text(encoding="utf-8")
    # Whole lines: one region's id may begin with another's (policy-sm90-batch-prefill and
    # policy-sm90-batch-prefill-short), so a substring count would see the longer one's marker.
    lines = [line.strip() for line in text.splitlines()]
    for region in [th.region for th in POLICY] + [g.region for g in GATES]:
        begin = f"# BEGIN GENERATED: {region} (tether render)"
        end = f"# END GENERATED: {region}"
        assert lines.count(begin) == 1 and lines.count(end) == 1, region
        assert lines.index(begin) < lines.index(end)


def test_sm90_short_calls_take_the_small_tile() -> None:
    from tether_kernels.launch_tables import SM90_MIN_PROGRAMS

    # batch x hq 32: 16 two-head programs per 128-row block, so SM90_MIN_PROGRAMS / 16
    # blocks is the first long call.
    blocks = SM90_MIN_PROGRAMS // 16
    short = launch_config("sm90", 128, "bf16", qo_len=(blocks - 1) * 128, batch_heads=32)
    long = launch_config("sm90", 128, "bf16", qo_len=blocks * 128, batch_heads=32)
    assert (short.block_m, short.heads_per_program) == (64, 1)
    assert (long.block_m, long.heads_per_program) == (128, 2)
    assert short.longest_first and long.longest_first
    # More heads or a larger batch fill the GPU at a shorter length.
    assert launch_config("sm90", 128, "bf16", qo_len=(blocks - 1) * 128, batch_heads=128) == long
    # No grid given means the long-call config.
    assert launch_config("sm90", 128, "bf16") == long


def test_every_arch_row_is_complete() -> None:
    from dataclasses import asdict

    from tether_kernels.arms import ARMS
    from tether_kernels.launch_tables import AMD_CONFIGS
    from tether_kernels_plugin import compile as C
    from tether_kernels_plugin import isa

    names = [row.name for row in archs.ARCH_TABLE]
    assert len(set(names)) == len(names)
    for row in archs.ARCH_TABLE:
        assert row.vendor in archs.VENDORS and row.family, row.name
        assert row.arms and row.route_order and row.kernel_names, row.name
        assert set(row.route_order) <= set(row.arms) and row.own_arm in row.arms, row.name
        # Every arm the row names exists and declares what it serves there, and every arm that
        # declares a Serves for the arch is one the row names: the row is where an arm runs.
        assert set(row.arms) == {a.name for a in ARMS.values() if row.name in a.serves}, row.name
        # Each arm that runs there has kernel-name patterns for the row's key (the CPU's
        # Triton arms, interpreted, launch no kernel: an empty tuple is a declaration).
        for name in row.arms:
            assert row.kernel_names in ARMS[name].kernels_by_arch, (row.name, name)
        if row.vendor == "cpu":
            assert row.capability is None and row.gcn is None
            assert row.target is None and row.isa is None
            continue
        assert (row.capability is not None) == (row.vendor == "nvidia"), row.name
        assert (row.gcn is not None) == (row.vendor == "amd"), row.name
        assert row.target is not None and row.isa is not None, row.name
        assert row.target[0] == {"nvidia": "cuda", "amd": "hip"}[row.vendor], row.name
        assert row.target[2] == row.isa.wave_size, row.name
        assert (row.isa.arch, row.isa.vendor) == (row.name, row.vendor), row.name
        assert all(v is not None for v in asdict(row.isa).values()), row.name
        # Its launch table answers for every head_dim and dtype the Triton arm serves.
        for d in (16, 32, 64, 128, 256):
            for dtype in ("f16", "bf16", "f32"):
                assert launch_config(row.name, d, dtype).block_m >= 16, (row.name, d, dtype)
        assert (row.vendor == "amd") == (row.name in AMD_CONFIGS), row.name
        # Its compile gate and the documents' arch list (CONTRIBUTING.md, "Add an arch").
        assert row.name in {g.arch for g in gates.COMPILE_GATES}, row.name
        assert C.TARGETS[row.name] == row.target and isa.LIMITS[row.name] is row.isa


def test_the_derived_names_match_the_rows() -> None:
    rows = archs.ARCH_TABLE
    assert archs.ARCHES == ("sm90", "gfx942", "gfx950", "gfx1151", "cpu")
    assert tuple(r.name for r in rows) == archs.ARCHES
    assert tuple(r.name for r in rows if r.vendor == "amd") == archs.AMD_ARCHES
    assert tuple(r.name for r in rows if r.vendor != "cpu") == archs.GPU_ARCHES
    assert {r.name: r.arms for r in rows} == archs.ARCH_ARMS
    assert {r.name: r.route_order for r in rows} == archs.ROUTE_ORDER
    assert archs.OWN_ARM == {"sm90": "gluon"}
    # Each policy threshold sends its calls to one of tether's kernels there (the arch's own
    # kernel, or the Triton kernel), else the first route arm that serves its scope: an arm
    # before ``otherwise`` in the route order serves none of the scope's head dims (cuDNN
    # does not serve 256, so the wide sm90 threshold's calls otherwise take the Triton
    # kernel).
    for th in POLICY:
        assert th.arm in (archs.ARCH[th.arch].own_arm, "triton")
        order = archs.ROUTE_ORDER[th.arch]
        if th.entry == "ragged_prefill":
            # No arm of the route order takes a ragged batch in one launch: per_request does.
            assert th.otherwise == archs.PER_REQUEST, th.region
            assert not any(get_arm(a).serves[th.arch].ragged for a in order), th.region
            continue
        assert th.otherwise in order, th.region
        dims = {d for f, op, v in th.scope if f == "head_dim" for d in (v if op == "in" else (v,))}
        for ahead in order[: order.index(th.otherwise)]:
            served = get_arm(ahead).serves[th.arch].head_dims
            assert dims and served is not None and not dims & set(served), (th.region, ahead)


def test_doc_arches_are_the_gpu_rows() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    table = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["tether"]
    assert tuple(table["doc_arches"]) == archs.GPU_ARCHES


def test_the_suite_and_the_library_share_the_arch_parser() -> None:
    import tether.arch

    assert archs.parse_gcn_arch is tether.arch.parse_gcn_arch
    for row in archs.ARCH_TABLE:
        tether.arch.check_arch(row.name)  # every row's name is one the suite records runs under


def test_a_row_refuses_inconsistent_facts() -> None:
    from dataclasses import replace

    sm90 = archs.ARCH["sm90"]
    with pytest.raises(ValueError, match="capability"):
        replace(sm90, capability=(8, 0))
    with pytest.raises(ValueError, match="routes to arms"):
        replace(sm90, route_order=("nope",))
    with pytest.raises(ValueError, match="warp size"):
        replace(sm90, target=("cuda", 90, 64))
    with pytest.raises(ValueError, match="ISA limits"):
        replace(archs.ARCH["gfx942"], isa=archs.ARCH["gfx950"].isa)
    with pytest.raises(ValueError, match="detection rule"):
        replace(archs.ARCH["gfx942"], capability=(9, 4))
