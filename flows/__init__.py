"""Prefect flows wrapping the plain pipeline stages (the only package that imports Prefect)."""
