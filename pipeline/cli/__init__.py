"""The command line: the composition root, the only pipeline code that parses arguments, prints, or imports
``flows`` (the console script ``censusdp`` is ``pipeline.cli:main``)."""

from censusdp.pipeline.cli.main import main

__all__ = ["main"]
