"""Compare two sweep runs of the same cells cell by cell (e.g. sharded against unsharded).

    .venv/bin/python ci/compare_runs.py BASE.json OTHER.json [--control CONTROL.json]

For each cell: both ratios, and whether OTHER/BASE lies inside the product of the two runs'
A/A floors for that cell (each run's own noise, compounded). With ``--control`` (a second
run set up like BASE: same cells, commit and harness), a cell also agrees when OTHER/BASE
lies inside the run-to-run band of BASE and CONTROL (tether.stats.run_band): the run-level
A/A control. Exit 0 when every cell agrees, 1 otherwise; 2 when the runs do not cover the
same cells. Prints to the terminal only; nothing here is written to docs or the store.
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
    parser.add_argument("--control", type=Path, help="a second run set up like BASE")
    args = parser.parse_args(argv)
    base, other = load_run(args.base), load_run(args.other)
    control = load_run(args.control) if args.control else None
    found = agreement(base, other, control)
    if found is not None and control is not None and found.run_band is None:
        print(f"cells differ between {base.id} and {control.id}", file=sys.stderr)
        return 2
    if found is None:
        print(f"cells differ between {base.id} and {other.id}", file=sys.stderr)
        return 2
    print(f"base  {base.id} ({base.provenance['device']})")
    print(f"other {other.id} ({other.provenance['device']})")
    for c in found.cells:
        where = f" gpu {c.gpu['index']}" if isinstance(c.gpu, dict) else ""
        print(f"{c.label:40s} base {c.base_ratio:.4f} other {c.other_ratio:.4f} "
              f"other/base {c.rel:.4f} floor [{c.low:.4f}, {c.high:.4f}] "
              f"{'ok' if c.inside else 'OUTSIDE'}"
              f"{'' if c.inside_run is None else ' band ok' if c.inside_run else ' band OUTSIDE'}"
              f"{where}")  # fmt: skip
    print(f"{found.agree} of {len(found.cells)} cells agree within the two runs' A/A floors")
    if found.run_band is None:
        return 0 if found.agree == len(found.cells) else 1
    low, high = found.run_band
    print(f"control {found.control_id} against base: {found.control_agree} of "
          f"{len(found.cells)} cells within their own A/A floors")  # fmt: skip
    print(f"control {found.control_id}: run-to-run band [{low:.4f}, {high:.4f}]; "
          f"{found.agree_run} of {len(found.cells)} cells inside their floors or the band")  # fmt: skip
    return 0 if found.agree_run == len(found.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
