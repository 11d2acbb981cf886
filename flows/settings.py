"""The hardened Prefect settings (flows/prefect.toml), entered as a Prefect settings context: the privacy-relevant
ones forced, not defaulted, so a user's profile or environment cannot turn result persistence back on.  Applied
around every flow call (CLI and ``serve``) and again inside the flow body, so a deployment run started by any worker
gets them too; nothing is written to ``os.environ``, and where Prefect runs stays the user's choice.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SETTINGS_FILE = Path(__file__).with_name("prefect.toml")
# not a privacy setting, so only a default: the embedded server can take longer than Prefect's 20 s to start
# on a busy 2-core machine, and a batch job should wait rather than fail
STARTUP_TIMEOUT_DEFAULT = {"server.ephemeral.startup_timeout_seconds": 120}


def hardened_settings() -> dict[str, Any]:
    """Dotted Prefect setting names -> values, as flows/prefect.toml states them."""
    table = tomllib.loads(SETTINGS_FILE.read_text())
    return {f"{section}.{key}": value for section, values in table.items() for key, value in values.items()}


@contextmanager
def hardened_prefect() -> Iterator[None]:
    """Run the enclosed Prefect calls under the hardened settings (forced) and the startup default."""
    from prefect.settings import get_current_settings, temporary_settings

    defaults = {name: value for name, value in STARTUP_TIMEOUT_DEFAULT.items()
                if not get_current_settings().server.ephemeral.model_fields_set & {"startup_timeout_seconds"}}
    with temporary_settings(updates=hardened_settings(), set_defaults=defaults):
        yield
