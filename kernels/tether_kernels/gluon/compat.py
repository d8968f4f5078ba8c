"""Where Triton's Gluon API differs between the releases the kernel supports: one name each.

The kernel (``attn_fwd_sm90.py``) and its launcher are one source for every Triton release the
arm declares (``tether_kernels.gluon.arm``); what a release renamed or added is bridged here,
by name, so the kernel reads the same on all of them. Each entry says which releases differ and
how (read from their sources: the wheels' ``triton/experimental/gluon`` and
``triton/backends/nvidia/driver.py``):

- ``tma_load``: a TMA copy of one tensor-descriptor block into shared memory, completing on an
  mbarrier. Triton 3.6 and 3.7 call it ``tma.async_copy_global_to_shared``; 3.8 adds
  ``tma.async_load`` beside it (same arguments: descriptor, coordinates, barrier, destination);
  3.9 keeps only ``async_load`` (the old name raises "has been removed").
- The host descriptor (not a name here, a field): what the NVIDIA launcher reads of a host tensor descriptor
  (``make_tensordesc_arg``). 3.6 reads ``base``, ``shape``, ``strides`` and ``padding``; 3.7 on
  also ``round_f32_to_tf32`` (tiled mode), which ``launch.HostDescriptor`` therefore carries,
  False, as Triton's own descriptor defaults it.

Importing this module imports triton's Gluon Hopper module (the kernel's own import), not torch.
"""

from __future__ import annotations

from triton.experimental.gluon.language.nvidia.hopper import tma

# The new name where the release has it, else the old one (same signature in every release).
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

__all__ = ["tma_load"]
