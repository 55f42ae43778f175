"""``python -m gnndist ...``: the same command line as the ``gnndist`` script."""

import sys

from gnndist.cli import main

sys.exit(main())
