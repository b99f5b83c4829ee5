"""Audits: a table's health (log, files, hygiene) as DataFrames of findings, and its repair."""
