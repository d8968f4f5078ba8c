"""What tether measures here: the RMSNorm case model, its two arms and one sweep.

Imported by tether because pyproject.toml's ``[tool.tether] plugins`` names this module.
Work is counted in bytes (a memory-bound kernel): x read once, weight read once, out written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether import registry
from tether.bench.engine import TimingPolicy
from tether.registry import Sweep

_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


@dataclass(frozen=True)
class RmsCase:
    rows: int
    hidden: int
    dtype: str

    @property
    def work(self) -> float:
        """Bytes one call must move: read x and the weight, write the output."""
        return float((2 * self.rows * self.hidden + self.hidden) * _BYTES[self.dtype])

    def fields(self) -> dict[str, Any]:
        return {"rows": self.rows, "hidden": self.hidden, "dtype": self.dtype}

    def inputs(self, device: str, seed: int) -> tuple[Any, Any]:
        import torch

        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[self.dtype]
        gen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(self.rows, self.hidden, device=device, dtype=dtype, generator=gen)
        w = torch.randn(self.hidden, device=device, dtype=dtype, generator=gen)
        return x, w

    def reach(self, arch: str) -> dict[str, Any]:
        return {}  # no router: both arms are public functions


@registry.case("rmsnorm")
def rms_case(fields: Mapping[str, Any]) -> RmsCase:
    return RmsCase(int(fields["rows"]), int(fields["hidden"]), str(fields["dtype"]))


@dataclass(frozen=True)
class RmsArm:
    name: str
    fn: Callable[..., Any]
    kernels: tuple[str, ...]
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: RmsCase, arch: str) -> str | None:
        return None if case.dtype in _BYTES else f"dtype {case.dtype} not served"

    def prepare(self, case: RmsCase, inputs: tuple[Any, Any], arch: str) -> Callable[[], Any]:
        x, w = inputs
        fn = self.fn
        return lambda: fn(x, w)

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return self.kernels if arch == "cpu" else ()


def _register() -> None:
    from rmsnorm_kernels.kernels import rmsnorm_fused, rmsnorm_ops

    registry.arm(RmsArm("torch_ops", rmsnorm_ops, (r"^aten::",)))
    registry.arm(RmsArm("fused", rmsnorm_fused, (r"^aten::",)))


_register()

registry.sweep(
    Sweep(
        name="rmsnorm",
        case="rmsnorm",
        axes={"rows": (256, 1024), "hidden": (1024, 4096)},
        fixed={"dtype": "f32"},
        arms={"A": "torch_ops", "B": "fused"},
        unit="B",
        timing=TimingPolicy(min_sample_s=1e-3, min_reps=6, max_reps=12, cell_cap_s=0.5),
        needs_gpu=False,
        description="RMSNorm, torch operators against the fused kernel, f32",
    )
)
