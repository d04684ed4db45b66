"""`python -m bench` (what `make bench` runs): see bench/harness.py."""

import sys

from bench.harness import main

sys.exit(main())
