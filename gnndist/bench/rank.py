"""One rank of a bench training job under ``--launcher``: ``python -m gnndist.bench.rank ARGS.json``.

Runs ``gnndist <args>`` with the argument list read from the file, so that a launcher's own
option parser (``torchrun``'s abbreviations would take ``--log``) never sees gnndist's flags.
"""

import json
import os
import sys

from gnndist.cli import exit_rank, main

if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        code = main(json.load(f))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        exit_rank(code)
    sys.exit(code)
