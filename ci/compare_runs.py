"""Compare two sweep runs of the same cells cell by cell (e.g. sharded against unsharded).

    .venv/bin/python ci/compare_runs.py BASE.json OTHER.json

For each cell: both ratios, and whether OTHER/BASE lies inside the product of the two runs'
A/A floors for that cell (each run's own noise, compounded). Exit 0 when every cell agrees
within it, 1 otherwise; 2 when the runs do not cover
the same cells. Prints to the terminal only; nothing here is written to docs or the store.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    from tether.stats import cell_stats
    from tether.store import load_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("other", type=Path)
    args = parser.parse_args(argv)
    base, other = load_run(args.base), load_run(args.other)
    a = {s.label: s for s in cell_stats(base)}
    b = {s.label: s for s in cell_stats(other)}
    if set(a) != set(b):
        print(f"cells differ: only in base {sorted(set(a) - set(b))}, "
              f"only in other {sorted(set(b) - set(a))}", file=sys.stderr)  # fmt: skip
        return 2
    outside = 0
    print(f"base  {base.id} ({base.provenance['device']})")
    print(f"other {other.id} ({other.provenance['device']})")
    for label in sorted(a):
        lo = a[label].floor[0] * b[label].floor[0]
        hi = a[label].floor[1] * b[label].floor[1]
        r0, r1 = a[label].ratio, b[label].ratio
        rel = r1 / r0
        inside = lo <= rel <= hi
        outside += not inside
        gpu = next((c.extra.get("gpu") for c in other.cells if c.key == a[label].key), None)
        where = f" gpu {gpu['index']}" if isinstance(gpu, dict) else ""
        print(f"{label:40s} base {r0:.4f} other {r1:.4f} other/base {rel:.4f} "
              f"floor [{lo:.4f}, {hi:.4f}] {'ok' if inside else 'OUTSIDE'}{where}")  # fmt: skip
    print(f"{len(a) - outside} of {len(a)} cells agree within the two runs' A/A floors")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
