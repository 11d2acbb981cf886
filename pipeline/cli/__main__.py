"""``python -m censusdp.pipeline.cli``: the console script without installing it."""

import sys

from censusdp.pipeline.cli.main import main

sys.exit(main())
