"""Maintenance: writing checkpoints, metadata cleanup, and the scheduled job that runs both."""

from deltaspark.maintenance.job import main

__all__ = ["main"]
