"""``tether probe``: a project's calls against ceilings measured in the same run.

A throughput number means little without the device's own ceiling next to it, measured in the
same minutes on the same device: the probe times each of its bounds (a dense matmul per dtype,
say) with the engine, then its sweep's cells, and writes a ``probe`` run whose ``results``
carry every bound's raw samples; rates and fractions are recomputed at render time, each cell
against the bound its ``bound_field`` names (its own dtype's).
"""

from __future__ import annotations

from tether.bench.engine import measure
from tether.bench.sweep import Bench
from tether.errors import NotRunHereError
from tether.registry import Probe
from tether.store.model import Run


def run_probe(bench: Bench, probe: Probe) -> Run:
    """Measure the bounds and the probe's cells; write and return the ``probe`` run."""
    sweep = probe.sweep
    if sweep.needs_gpu and bench.target.device == "cpu":
        # Refuse before timing anything: the bounds alone take minutes on a CPU.
        raise NotRunHereError(
            f"probe {sweep.name} needs a GPU; this host is {bench.target.device_name}"
        )
    timing = bench.timing_of(sweep)
    bounds = {}
    for bound in probe.bounds(bench.target.device):
        call = bound.prepare(bench.target.device)
        samples = measure({"B": call}, timing, device=bench.target.device).samples["B"]
        bounds[bound.label] = {"work": bound.work, "samples": list(samples), "what": bound.what}
    return bench.sweep(
        sweep,
        kind="probe",
        results={"bounds": bounds},
        config_extra={"bound_field": probe.bound_field},
    )
