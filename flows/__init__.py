"""Prefect flows wrapping the plain pipeline stages.  Importing this package applies the hardened settings."""

from flows.settings import apply_hardened_settings

apply_hardened_settings()
