"""tether_kernels_plugin.compile: the variants are the arms' own launches, compiled with no GPU.

The variant map is derived from ``launch_config`` and from what the Triton arms pass to the
kernel (recorded, not run); a few variants are compiled for real for every target, and what
the compiler says is checked against the limits table (LLVM states its own occupancy).
"""

from __future__ import annotations

import copy

import pytest
from tether_kernels.gates import COMPILE_GATES
from tether_kernels.launch_tables import CHUNKED_PREFILL_16K, launch_config
from tether_kernels.serves import tile_head_dim
from tether_kernels_plugin import compile as C
from tether_kernels_plugin.isa import LIMITS

TARGET_ARCHES = tuple(C.TARGETS)
AMD = tuple(a for a in TARGET_ARCHES if LIMITS[a].vendor == "amd")


@pytest.fixture(scope="module")
def plans() -> dict[str, list[C.Variant]]:
    return {arch: C.variants(arch) for arch in TARGET_ARCHES}


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in TARGET_ARCHES])
def test_every_config_launch_config_returns_is_compiled(arch: str, plans) -> None:
    labels = {
        (d, v.key["dtype"], v.key["config"]) for v in plans[arch] for d in v.shape["head_dims"]
    }
    for d, dtype, cfg, _qo, _bh in C.launch_configs(arch):
        assert (d, dtype, C.config_label(cfg)) in labels
    # Calls the suite names pick configs that are in the map.
    chunked = launch_config(arch, 128, "f16", qo_len=2048, batch_heads=CHUNKED_PREFILL_16K["hq"])
    short = launch_config(arch, 128, "bf16", qo_len=256, batch_heads=8)
    for cfg, dtype in ((chunked, "f16"), (short, "bf16")):
        assert (128, dtype, C.config_label(cfg)) in labels


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in TARGET_ARCHES])
def test_variant_axes(arch: str, plans) -> None:
    keys = [tuple(sorted(v.key.items())) for v in plans[arch]]
    assert len(keys) == len(set(keys)), "two variants share a cell key"
    assert {v.key["margin"] for v in plans[arch]} == set(C.arm_margins(arch).values())
    assert {v.key["causal"] for v in plans[arch]} == {True, False}
    assert {v.key["lse"] for v in plans[arch]} == {True, False}
    # Every head_dim the arm serves is compiled, in the variant of its tile (issue 24).
    covered = {d for v in plans[arch] for d in v.shape["head_dims"]}
    assert covered == set(C.head_dims(arch))
    assert all(v.key["head_dim"] == min(v.shape["head_dims"]) for v in plans[arch])


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in TARGET_ARCHES])
def test_padded_head_dims_share_their_tiles_compile(arch: str, plans) -> None:
    # Head dims padded onto one tile with one config differ only in a run-time argument, so
    # each tile width has one compile without masks and, below it, one with.
    for v in plans[arch]:
        dims = v.shape["head_dims"]
        widths = {tile_head_dim(d) for d in dims}
        assert len(widths) == 1, dims
        padded = [d != tile_head_dim(d) for d in dims]
        assert all(padded) or dims == [tile_head_dim(dims[0])], dims


def test_margins_come_from_the_arms() -> None:
    assert C.arm_margins("gfx942") == {"triton": 8, "triton_eager": 0}


def test_two_heads_per_program_falls_back_on_odd_groups(plans) -> None:
    # sm90's long-call d128 config runs two heads per program; an odd GQA group runs one.
    heads = {v.key["heads"] for v in plans["sm90"] if "hpp2" in v.key["config"]}
    assert heads == {1, 2}


def test_recording_leaves_the_kernel_as_it_was() -> None:
    from tether_kernels.triton.attn_fwd import _attn_fwd

    with C._recording() as calls:
        assert calls == []
    assert "run" not in vars(_attn_fwd)


def test_jobs_are_what_the_launcher_passes(plans) -> None:
    v = next(v for v in plans["gfx942"] if v.key["head_dim"] == 64 and v.key["dtype"] == "f16")
    names = C._param_names()
    consts = {names[k[0]]: val for k, val in v.job["constexprs"].items()}
    cfg = launch_config("gfx942", 64, "f16", qo_len=v.shape["qo_len"], batch_heads=v.shape["hq"])
    assert (consts["BLOCK_M"], consts["BLOCK_N"], consts["HEAD_DIM_PAD"]) == (
        cfg.block_m,
        cfg.block_n,
        64,
    )
    assert v.job["options"]["num_warps"] == cfg.num_warps
    assert v.job["options"]["waves_per_eu"] == cfg.waves_per_eu
    # Triton's JIT specialisation: 16-byte aligned pointers within 2 GB become buffer loads.
    assert ["tt.pointer_range", 32] in v.job["attrs"][(0,)]


@pytest.fixture(scope="module")
def compiled(plans) -> dict[tuple[str, ...], dict]:
    """One f16 and one f32 variant per target at head_dim 16, compiled for real; on AMD also
    without the waves_per_eu hint (key ``("free", arch, dtype)``), see the LLVM test."""
    jobs = {}
    for arch in TARGET_ARCHES:
        for dtype in ("f16", "f32"):
            v = next(
                v
                for v in plans[arch]
                if v.key["head_dim"] == 16
                and v.key["dtype"] == dtype
                and v.key["causal"]
                and not v.key["lse"]
            )
            jobs[(arch, dtype)] = v.job
            if arch in AMD:
                free = copy.deepcopy(v.job)
                free["options"]["waves_per_eu"] = 0
                jobs[("free", arch, dtype)] = free
    metrics = C.compile_all(list(jobs.values()), workers=2)
    return dict(zip(jobs, metrics, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in TARGET_ARCHES])
def test_f16_main_loops_run_on_the_matrix_units(arch: str, compiled) -> None:
    got = compiled[(arch, "f16")]
    assert len(got["loops"]) == 2, "the unmasked and the masked key loop"
    assert all(loop["matrix"] > 0 for loop in got["loops"])
    assert got["lds_bytes"] > 0 and got["lds_limit_bytes"] == LIMITS[arch].lds_per_workgroup


@pytest.mark.slow
def test_a_dot_on_fmas_shows(compiled) -> None:
    # RDNA3.5 WMMA takes no f32 inputs: the f32 dots fall back to scalar FMAs, and the
    # compile cell says so (the gate exempts f32 there, see COMPILE_GATES).
    got = compiled[("gfx1151", "f32")]
    assert got["loops"] and all(loop["matrix"] == 0 for loop in got["loops"])
    assert all(loop["fma"] > 0 for loop in got["loops"])
    gate = next(g for g in COMPILE_GATES if g.arch == "gfx1151")
    assert gate.failures({"dtype": "f32"}, got) == ()
    assert gate.failures({"dtype": "f16"}, got)  # the same code as an f16 variant would fail


@pytest.mark.slow
@pytest.mark.parametrize("arch", AMD)
def test_limits_table_agrees_with_llvm(arch: str, compiled) -> None:
    # Without a waves_per_eu hint (which LLVM folds into the occupancy it states), LLVM's
    # "; Occupancy:" is what the kernel's VGPRs and SGPRs allow: the table must agree.
    for dtype in ("f16", "f32"):
        got = compiled[("free", arch, dtype)]
        by = got["occupancy"]["by"]
        assert got["llvm_occupancy"] == min(by["registers"], by.get("sgprs", by["registers"]))
