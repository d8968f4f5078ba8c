"""The model catalog (kernels/models.toml, issue 43 item 1): enough served models, each layout
sane and sourced, every per-GPU layout the sharding rule's, and the table in docs/backends.md
rendered from it through [tool.tether.render] data."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.errors import UsageError
from tether_kernels_plugin.catalog import CATALOG, TP_DEGREES, catalog_shard, load_catalog

ROOT = Path(__file__).resolve().parents[2]
# The families the issue names, each of which the catalog must hold at least one model of.
FAMILIES = ("Llama 3", "Qwen2.5", "Qwen3", "Qwen3 MoE", "Mistral", "Mixtral", "Gemma 2",
            "Gemma 3", "Phi", "GPT-OSS")  # fmt: skip


def test_catalog_lists_the_served_families() -> None:
    models = load_catalog()
    assert len(models) >= 25
    assert set(FAMILIES) <= {m.family for m in models}
    for m in models:
        assert m.hq % m.hkv == 0, m.name
        assert m.head_dim in (64, 80, 96, 128, 256), m.name
        assert m.source.startswith("https://huggingface.co/"), m.name
        assert m.tp[1] == (m.hq, m.hkv), m.name


@pytest.mark.parametrize(
    ("hq", "hkv", "tp", "want"),
    [
        (28, 4, 2, (14, 2)),  # KV heads split
        (28, 4, 4, (7, 1)),
        (28, 4, 8, None),  # 28 query heads do not split 8 ways
        (64, 8, 8, (8, 1)),
        (64, 4, 8, (8, 1)),  # fewer KV heads than GPUs: one replicated per GPU
        (40, 10, 4, None),  # 10 KV heads neither split 4 ways nor divide 4
        (32, 32, 8, (4, 4)),
    ],
)
def test_shard_rule(hq: int, hkv: int, tp: int, want: tuple[int, int] | None) -> None:
    assert catalog_shard(hq, hkv, tp) == want


def test_an_entry_that_disagrees_with_the_rule_names_the_model(tmp_path: Path) -> None:
    text = CATALOG.read_text(encoding="utf-8")
    first = load_catalog()[0]
    bad = text.replace(f'8 = "{first.tp[8][0]}/{first.tp[8][1]}"', '8 = "3/1"', 1)  # type: ignore[index]
    assert bad != text
    path = tmp_path / "models.toml"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(UsageError, match=f"{first.name}.*tp 8"):
        load_catalog(path)


def test_a_missing_field_and_bad_toml_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(UsageError, match="missing"):
        load_catalog(path)
    path.write_text("[[model\n", encoding="utf-8")
    with pytest.raises(UsageError, match="cannot read"):
        load_catalog(path)


def test_backends_page_renders_every_model_with_its_layouts() -> None:
    page = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    for m in load_catalog():
        cells = ["-" if (lay := m.tp[t]) is None else f"{lay[0]}/{lay[1]}" for t in TP_DEGREES]
        row = f"| {m.name} | {m.family} | {m.hq}/{m.hkv} | {m.head_dim} | " + " | ".join(cells)
        assert row in page.replace("\\_", "_"), m.name


def test_render_data_names_the_file_it_cannot_read(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from tether.render import render_data

    (tmp_path / "ok.toml").write_text("a = 1\n", encoding="utf-8")
    (tmp_path / "bad.toml").write_text("a = \n", encoding="utf-8")
    ok = SimpleNamespace(root=tmp_path, render_data={"x": "ok.toml"})
    assert render_data(ok) == {"x": {"a": 1}}
    for rel, why in (("bad.toml", "not valid TOML"), ("gone.toml", "names no file")):
        proj = SimpleNamespace(root=tmp_path, render_data={"x": rel})
        with pytest.raises(UsageError, match=f"{rel}.*{why}"):
            render_data(proj)


def test_the_regret_sweeps_time_one_designed_sample_of_the_catalog() -> None:
    # Issue 43 item 3: one grid axis across the three sweeps, so a cell names one call in
    # each and the lowest ratio per call is the public call against its fastest arm; every
    # catalog layout, every length and both half dtypes are in the sample, and an arm's
    # sweep leaves out exactly the calls that arm refuses.
    from tether import registry
    from tether_kernels import Shape
    from tether_kernels.arms import get_arm
    from tether_kernels_plugin.sweeps import (
        REGRET_ARMS,
        REGRET_AXIS,
        REGRET_LENGTHS,
        catalog_layouts,
        regret_design,
    )

    design = regret_design()
    assert len(set(design)) == len(design)
    layouts = {"/".join(c.split("/")[:3]) for c in design}
    every = {
        f"{lay[0]}/{lay[1]}/{m.head_dim}"
        for m in load_catalog()
        for lay in (m.tp[1], m.tp[8])
        if lay is not None
    }
    assert layouts == set(catalog_layouts(head_dims=None)) == every
    assert {"/".join(c.split("/")[3:5]) for c in design} == set(REGRET_LENGTHS)
    assert {c.split("/")[5] for c in design} == {"f16", "bf16"}
    reg = registry.load(["tether_kernels_plugin"])
    for short, arm in REGRET_ARMS.items():
        sweep = reg.get_sweep(f"api-regret-{short}")
        assert set(sweep.axes) == {REGRET_AXIS}
        assert sweep.arms == {"A": arm, "B": "single_prefill"}
        timed = set(sweep.axes[REGRET_AXIS])
        for call in design:
            hq, hkv, d, qo, kv, dtype = call.split("/")
            shape = Shape(1, int(qo), int(kv), int(hq), int(hkv), int(d), dtype, True)
            refused = get_arm(arm).declared_refusal(shape, "sm90")
            assert (call in timed) == (refused is None), (arm, call, refused)
