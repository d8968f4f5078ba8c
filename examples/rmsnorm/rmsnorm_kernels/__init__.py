"""RMSNorm two ways: torch operators one by one, and fused (``torch.nn.functional.rms_norm``)."""

from rmsnorm_kernels.kernels import rmsnorm_fused, rmsnorm_ops

__all__ = ["rmsnorm_fused", "rmsnorm_ops"]
