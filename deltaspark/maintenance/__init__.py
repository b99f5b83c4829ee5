"""Maintenance: writing checkpoints, metadata cleanup and vacuum (the scheduled job that runs them
is `deltaspark.operations.maintenance_job`)."""
