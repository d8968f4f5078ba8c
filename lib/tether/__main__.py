"""``python -m tether`` is the same as the ``tether`` command."""

from tether.cli import run

run()
