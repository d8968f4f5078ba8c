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
    from tether.stats import agreement
    from tether.store import load_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("other", type=Path)
    args = parser.parse_args(argv)
    base, other = load_run(args.base), load_run(args.other)
    found = agreement(base, other)
    if found is None:
        print(f"cells differ between {base.id} and {other.id}", file=sys.stderr)
        return 2
    print(f"base  {base.id} ({base.provenance['device']})")
    print(f"other {other.id} ({other.provenance['device']})")
    for c in found.cells:
        where = f" gpu {c.gpu['index']}" if isinstance(c.gpu, dict) else ""
        print(f"{c.label:40s} base {c.base_ratio:.4f} other {c.other_ratio:.4f} "
              f"other/base {c.rel:.4f} floor [{c.low:.4f}, {c.high:.4f}] "
              f"{'ok' if c.inside else 'OUTSIDE'}{where}")  # fmt: skip
    print(f"{found.agree} of {len(found.cells)} cells agree within the two runs' A/A floors")
    return 0 if found.agree == len(found.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
