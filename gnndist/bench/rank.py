"""One rank of a bench training job under ``--launcher``: ``python -m gnndist.bench.rank ARGS.json``.

Runs ``gnndist <args>`` with the argument list read from the file, so that a launcher's own
option parser (``torchrun``'s abbreviations would take ``--log``) never sees gnndist's flags.
"""

import json
import sys

from gnndist.cli import main
from gnndist.launcher import exit_rank, under_torchrun

if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        code = main(json.load(f))
    if under_torchrun():
        exit_rank(code)
    sys.exit(code)
