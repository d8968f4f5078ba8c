"""Defaults chosen from tuning runs, each by the rule ``tether.policy.TunedChoice`` states.

A policy file (``[tool.tether] policy``): ``tether check`` holds each choice to its rule on the
tuning run it cites, which must be the newest ok run of its grid and describe the current
kernels, and renders the outcome beside the default. Not a kernel source: citing a newer run
here makes no timing run stale. Pure data, no torch.
"""

from __future__ import annotations

from tether.policy import TunedChoice

from tether_kernels.gluon.launch import DEFAULT_VARIANT

TUNED: tuple[TunedChoice, ...] = (
    TunedChoice(
        id="gluon-sm90-variant",
        arch="sm90",
        # The Gluon kernel's variants, square causal calls against the fastest peer
        # (kernels/tether_kernels_plugin/sweeps.py; kernels/NOTES.md renders the whole run).
        sweep="tune-gluon-sm90",
        chosen=DEFAULT_VARIANT,
        run="20261207T080513Z-tune-tune-gluon-sm90-sm90-1d1e90891bcb",
        region="tuned-gluon-sm90-variant",
    ),
)
