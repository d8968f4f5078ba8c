"""Validation of run files: each malformed FIXTURE is refused, naming the file and the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tether.errors import RunFileError, UnsafeTextError
from tether.store import check_safe_text, load_run, run_from_json

from validate.suite.runfactory import (
    make_gate_run,
    make_not_measured_run,
    make_probe_run,
    make_sweep_run,
    make_verify_run,
)

Mutation = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def sweep_json() -> dict[str, Any]:
    return make_sweep_run().to_json()


def _set(path: str, value: object) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = data
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Mutation:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = data
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        del node[last]

    return mutate


def _duplicate_cell(data: dict[str, Any]) -> None:
    data["cells"].append(copy.deepcopy(data["cells"][0]))


def _drop_cell(data: dict[str, Any]) -> None:
    data["cells"].pop()


BAD = [
    pytest.param(_set("schema", "tether.run/9"), "schema", id="unknown-schema"),
    pytest.param(
        _set("schema", "tether.run/1"), "schema: tether.run/1 is retired", id="retired-schema"
    ),
    pytest.param(_set("surprise", 1), "surprise: unknown key", id="unknown-top-key"),
    pytest.param(_delete("guard"), "guard: missing key", id="missing-top-key"),
    pytest.param(_set("kind", "bench"), "kind", id="bad-kind"),
    pytest.param(_set("status", "fine"), "status", id="bad-status"),
    pytest.param(_set("status", "rejected"), "reason", id="missing-reason"),
    pytest.param(_set("reason", "why not"), "reason: must be null", id="reason-when-ok"),
    pytest.param(
        _set("cells/3/samples/A2", [1e-4, float("nan")]), "cells[3].samples.A2[1]", id="nan-sample"
    ),
    pytest.param(
        _set("cells/3/samples/A2", [float("inf")]), "cells[3].samples.A2[0]", id="inf-sample"
    ),
    pytest.param(_set("cells/2/samples/B", [-1e-4]), "cells[2].samples.B[0]", id="negative-sample"),
    pytest.param(_set("cells/2/samples/B", [0.0]), "cells[2].samples.B[0]", id="zero-sample"),
    pytest.param(_set("cells/2/samples/B", []), "cells[2].samples.B", id="empty-samples"),
    pytest.param(
        _delete("cells/3/samples/A2"),
        "cells[3].samples.A2: missing A/A control",
        id="no-aa-control",
    ),
    pytest.param(_set("cells/0/work", 0), "cells[0].work", id="zero-work"),
    pytest.param(_set("cells/0/blocks", [5, 4]), "cells[0].samples.A", id="blocks-off-samples"),
    pytest.param(_set("cells/0/blocks", [0, 10]), "cells[0].blocks[0]", id="empty-block"),
    pytest.param(_set("guard/mode", "maybe"), "guard.mode", id="bad-guard-mode"),
    pytest.param(
        _set("guard/holder", None), "guard: a held run records the holder", id="held-no-holder"
    ),
    pytest.param(
        _set("guard/mode", "refused"), "guard.mode: an ok run cannot", id="ok-but-refused"
    ),
    pytest.param(_delete("guard/reason"), "guard.reason: missing key", id="guard-missing-key"),
    pytest.param(_set("config/unit", "FLOP/s"), "config.unit", id="bad-unit"),
    pytest.param(
        _set("cells/0/surprise", {}), "cells[0].surprise: unknown key", id="unknown-cell-key"
    ),
    pytest.param(_delete("cells/0/reach"), "cells[0].reach: missing key", id="missing-cell-key"),
    pytest.param(_duplicate_cell, "duplicates cells[0]", id="duplicated-cell"),
    pytest.param(_drop_cell, "grid cell(s) missing", id="grid-mismatch"),
    pytest.param(_set("cells/0/key/hq", 48), "cells[0].key.hq", id="key-off-grid"),
    pytest.param(_set("cells/0/key/hq", 16.0), "cells[0].key.hq", id="key-wrong-type"),
    pytest.param(_set("provenance/arch", "volta"), "provenance.arch", id="not-an-arch"),
    pytest.param(_set("provenance/device", "H200 | 9999 |"), "provenance.device", id="pipe-device"),
    pytest.param(_set("provenance/device", "<script>"), "provenance.device", id="html-device"),
    pytest.param(_set("provenance/host", "[x](http://evil)"), "provenance.host", id="link-host"),
    pytest.param(_set("provenance/started", "yesterday"), "provenance.started", id="bad-stamp"),
    pytest.param(_set("provenance/git_sha", "abc"), "provenance.git_sha", id="bad-sha"),
    pytest.param(_set("cells/1/flags", ["ok\nfake row"]), "cells[1].flags[0]", id="newline-flag"),
    pytest.param(
        _set("cells/1/kernels/B", ["void k<int>|x"]), "cells[1].kernels.B[0]", id="pipe-kernel"
    ),
    pytest.param(_set("cells/1/extra", {"t": float("nan")}), "cells[1].extra.t", id="nan-extra"),
    pytest.param(_set("name", "Bad Name"), "name", id="bad-name"),
    pytest.param(_set("config/arms", {"B": "triton"}), "config.arms", id="sweep-without-A"),
]


@pytest.mark.parametrize(("mutate", "field"), BAD)
def test_bad_run_is_refused_naming_the_field(
    sweep_json: dict[str, Any], mutate: Mutation, field: str
) -> None:
    data = copy.deepcopy(sweep_json)
    mutate(data)
    with pytest.raises(RunFileError) as info:
        run_from_json(data, "fixture.json")
    assert field in str(info.value)
    assert str(info.value).startswith("fixture.json: ")


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(make_sweep_run, id="sweep"),
        pytest.param(make_gate_run, id="gate"),
        pytest.param(make_probe_run, id="probe"),
        pytest.param(make_verify_run, id="verify"),
        pytest.param(make_not_measured_run, id="not-measured"),
    ],
)
def test_valid_fixtures_round_trip(build: Callable[[], Any]) -> None:
    run = build()
    again = run_from_json(json.loads(json.dumps(run.to_json())), "fixture")
    assert again.to_json() == run.to_json()


def test_long_cpp_kernel_names_stay_loadable() -> None:
    from tether.store.model import Cell

    name = "void cutlass::Kernel<Sm90<float, 128>>(Params<Arr[4]> const&)"
    base = make_sweep_run()
    cells = list(base.cells)
    cells[0] = Cell(**{**cells[0].__dict__, "kernels": {**cells[0].kernels, "A": (name,)}})
    run = make_sweep_run(cells=cells)
    assert run_from_json(json.loads(run.dumps()), "fixture").cells[0].kernels["A"] == (name,)


def test_gate_results_are_checked() -> None:
    data = make_gate_run().to_json()
    data["results"]["threshold"] = "high"
    with pytest.raises(RunFileError, match=r"results\.threshold"):
        run_from_json(data, "fixture")
    data = make_gate_run().to_json()
    data["results"]["passed"] = True  # a verdict is recomputed from samples, never stored
    with pytest.raises(RunFileError, match=r"results\.passed: unknown key"):
        run_from_json(data, "fixture")


def test_any_valid_arch_name_is_accepted(tmp_path: Path) -> None:
    # Arches are open: an A100, an L40S, a B200 or a new AMD target record runs unchanged.
    for arch in ("sm80", "sm89", "sm100", "gfx1201", "cpu"):
        run = make_sweep_run(arch=arch)
        assert run_from_json(json.loads(run.dumps()), "fixture").arch == arch


def test_one_edited_sample_fails_the_digest(sweep_json: dict[str, Any]) -> None:
    data = copy.deepcopy(sweep_json)
    data["cells"][2]["samples"]["B"][1] *= 0.97  # still a valid duration
    with pytest.raises(RunFileError, match="digest: does not match the file's content"):
        run_from_json(data, "fixture.json")


def test_a_resealed_edit_breaks_the_content_addressed_id(sweep_json: dict[str, Any]) -> None:
    from tether.store.model import digest_of

    data = copy.deepcopy(sweep_json)
    data["cells"][2]["samples"]["B"][1] *= 0.97
    data["digest"] = digest_of(data)  # a forger recomputes the digest ...
    with pytest.raises(RunFileError, match="id: does not end with its digest"):
        run_from_json(data, "fixture.json")  # ... and must rename the run, breaking citations


def test_unguarded_runs_load_but_are_not_evidence() -> None:
    from validate.suite.runfactory import UNGUARDED

    run = make_sweep_run(guard=UNGUARDED)
    again = run_from_json(json.loads(run.dumps()), "fixture")
    assert again.guard.mode == "unguarded" and not again.evidence_grade
    assert make_sweep_run().evidence_grade


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_file_level_failures_name_the_file(tmp_path: Path, sweep_json: dict[str, Any]) -> None:
    good = json.dumps(sweep_json, indent=1)
    stem = sweep_json["id"]
    truncated = _write(tmp_path / "sm90" / f"{stem}.json", good[: len(good) // 2])
    with pytest.raises(RunFileError, match="invalid JSON") as info:
        load_run(truncated)
    assert str(truncated) in str(info.value)

    nan_text = good.replace('"work": ', '"work": NaN, "x": ', 1)
    nan = _write(tmp_path / "a" / "sm90" / f"{stem}.json", nan_text)
    with pytest.raises(RunFileError, match="NaN is not allowed"):
        load_run(nan)

    renamed = _write(tmp_path / "b" / "sm90" / "other-name.json", good)
    with pytest.raises(RunFileError, match=r"id: .*differs from the file name"):
        load_run(renamed)

    moved = _write(tmp_path / "c" / "gfx942" / f"{stem}.json", good)
    with pytest.raises(RunFileError, match=r"provenance\.arch: .*differs from its folder"):
        load_run(moved)

    dup = _write(tmp_path / "d" / "sm90" / f"{stem}.json", good.replace("{", '{"id": "x",', 1))
    with pytest.raises(RunFileError, match="duplicated key"):
        load_run(dup)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("H200 | 9999 |", id="pipe"),
        pytest.param("<script>", id="html"),
        pytest.param("[x](http://evil)", id="link"),
        pytest.param("a\u202eb", id="bidi-override"),
        pytest.param("`code`", id="backtick"),
    ],
)
def test_check_safe_text_refuses_markdown_structure(text: str) -> None:
    with pytest.raises(UnsafeTextError, match="device"):
        check_safe_text(text, "device")


def test_check_safe_text_kernel_rule() -> None:
    assert check_safe_text("f<int>[2]", "k", kernel=True) == "f<int>[2]"
    with pytest.raises(UnsafeTextError):
        check_safe_text("f\n", "k", kernel=True)


def _unsafe_by_category(ch: str, kernel: bool) -> bool:
    # The rule as safe.py's docstring states it, character by character (the fast path for
    # ASCII text must agree with it everywhere).
    import unicodedata

    forbidden = "|\n\r`" if kernel else "|\n\r<>[]`"
    return ch in forbidden or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


@pytest.mark.parametrize("kernel", [False, True], ids=["text", "kernel"])
def test_check_safe_text_agrees_with_the_per_character_rule(kernel: bool) -> None:
    # Every ASCII character and a sample of the rest (C1 controls, bidi and zero-width
    # formats, line and paragraph separators, letters), each inside an ASCII and a non-ASCII
    # string: the regex path and the per-character path must refuse exactly the same.
    points = [*range(0x80), *range(0x80, 0xA1), 0x200B, 0x202E, 0x2028, 0x2029, 0xE9, 0x1F600]
    for cp in points:
        ch = chr(cp)
        for text in (f"ab{ch}c", f"\u00e9{ch}"):
            try:
                check_safe_text(text, "t", kernel=kernel)
                refused = False
            except UnsafeTextError:
                refused = True
            assert refused == _unsafe_by_category(ch, kernel), (hex(cp), text)


def _random_json(rng: Any, depth: int = 0) -> object:
    pick = rng.random()
    if depth > 7 or pick < 0.3:
        return "".join(rng.choice('[]{}"\\ab\n\u00e9') for _ in range(rng.randint(0, 6)))
    if pick < 0.6:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        str(_random_json(rng, 99)): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))
    }


def test_json_depth_agrees_with_the_exact_count() -> None:
    import random

    from tether.store.schema import MAX_DEPTH, json_depth, nesting_depth

    rng = random.Random(46)
    for _ in range(3000):
        text = json.dumps(_random_json(rng), ensure_ascii=rng.random() < 0.5)
        assert json_depth(text) == nesting_depth(text), text
    # Strings full of brackets and escaped quotes, and nesting past the limit.
    tricky = json.dumps({"a": ['\\"]]]', {"b": "[[[{"}], "c": "\\\\"})
    assert json_depth(tricky) == nesting_depth(tricky) == 3
    deep = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    assert json_depth(deep) == MAX_DEPTH + 5
    assert json_depth("[[]") == nesting_depth("[[]")  # not JSON: the exact count answers


def test_a_number_that_overflows_a_float_is_refused_where_it_stands(
    tmp_path: Path, sweep_json: dict[str, Any]
) -> None:
    # The C scanner parses 1e999 as infinity; the samples' own check names the sample, and a
    # free-form field fails the digest's canonical JSON (which allows no infinity).
    good = json.dumps(sweep_json, indent=1)
    stem = sweep_json["id"]
    sample = sweep_json["cells"][0]["samples"]["A"][0]
    in_samples = good.replace(json.dumps(sample), "1e999", 1)
    path = _write(tmp_path / "a" / "sm90" / f"{stem}.json", in_samples)
    with pytest.raises(RunFileError, match=r"cells\[0\]\.samples\.A\[0\]: not finite"):
        load_run(path)
    data = copy.deepcopy(sweep_json)
    data["cells"][0]["extra"]["huge"] = "HUGE"
    in_extra = json.dumps(data).replace('"HUGE"', "1e999")
    path = _write(tmp_path / "b" / "sm90" / f"{stem}.json", in_extra)
    with pytest.raises(RunFileError, match="not finite") as info:
        load_run(path)
    assert str(path) in str(info.value)
