"""``python -m pipeline.cli``: the console script without installing it."""

import sys

from pipeline.cli.main import main

sys.exit(main())
