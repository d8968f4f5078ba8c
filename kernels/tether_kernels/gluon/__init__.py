"""Gluon kernels (``triton.experimental.gluon``): explicit wgmma, TMA, mbarriers and warp
specialisation. Imported only where they run (sm90 with a Triton that ships Gluon) or are
compiled ahead of time; importing ``tether_kernels`` never imports them (this package's
``arm`` and ``launch`` read no Triton module).

Importing the package (``tether_kernels`` does, through the arms' declarations) warns once,
``UntestedTritonWarning``, where the installed Triton is no release the kernel is written for
(gluon/releases.toml), naming the arm it cannot run and why.
"""

from __future__ import annotations

from tether_kernels.gluon.launch import UntestedTritonWarning, warn_untested_triton

warn_untested_triton()  # a package body runs once per process

__all__ = ["UntestedTritonWarning"]
