"""RMSNorm over the last dimension: ``x / sqrt(mean(x**2) + eps) * weight``.

x: [rows, hidden]; weight: [hidden]; out like x. ``rmsnorm_ops`` spells it in torch operators
(each a pass over memory); ``rmsnorm_fused`` calls torch's fused kernel.
"""

from __future__ import annotations

import torch

EPS = 1e-6


def rmsnorm_ops(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The baseline: square, mean, add, reciprocal square root, two multiplies."""
    scale = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + eps)
    return (x.float() * scale).to(x.dtype) * weight


def rmsnorm_fused(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """torch's fused RMSNorm."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
