"""Benchmarks: a synthetic Delta log generator and a runner comparing deltaspark with delta-rs.

Nothing here is imported by the package or by timed tests; `tests/test_benchmarks_smoke.py` runs a
tiny end-to-end pass so that the harness keeps working.
"""
