"""Release helpers shared by the ledger and seeded-noise tests: the CLI in process, a seeded release."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err


def release(capsys: pytest.CaptureFixture[str], config: Path, *extra: str) -> tuple[int, str, str]:
    return cli(capsys, "release", str(config), "--no-prefect", "--insecure-seed", "5", *extra)
