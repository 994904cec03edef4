"""``python -m cva``: the ``cva`` command line (see :mod:`cva.cli`)."""

import sys

from cva.cli import main

sys.exit(main())
