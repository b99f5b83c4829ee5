"""MERGE INTO as DataFrame transforms: the builder (`builder`), its clauses (`clauses`), which
target files the condition lets it skip (`pruning`), each clause's new values (`values`) and the
plan that runs it (`execute`)."""
