"""Denpex: live triage of distributed ML training logs."""

__version__ = "0.1.0"
