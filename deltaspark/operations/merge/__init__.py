"""MERGE INTO as DataFrame transforms: the builder (`builder`), its clauses (`clauses`), which
target files the condition lets it skip (`pruning`) and the plan that runs it (`execute`)."""
