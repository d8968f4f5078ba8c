"""tether_kernels as tether sees it: the plugin that registers the kernel library with the suite.

``[tool.tether] plugins`` names this package; importing it registers the attention case model
(cases.py), the arms and entry points (adapters.py), the sweeps, probe and gate calls
(sweeps.py) and the compiler (compile.py, ``tether compile``) with ``tether.registry``. The
kernel library itself (``tether_kernels``) imports none of this: a user of ``single_prefill``
never loads the suite. Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from tether import registry

from tether_kernels_plugin import adapters, cases, compile, sweeps

registry.compiler(compile.COMPILER)

__all__ = ["adapters", "cases", "compile", "sweeps"]
