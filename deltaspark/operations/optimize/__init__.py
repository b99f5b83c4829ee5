"""OPTIMIZE: compaction, Z-order and deletion-vector purge (see `execute`)."""
