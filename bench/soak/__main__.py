"""``python -m bench.soak``: the same as ``bench/soak.py``."""

import sys

from bench.soak.main import main

sys.exit(main(sys.argv[1:]))
