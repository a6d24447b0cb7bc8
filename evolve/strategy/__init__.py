"""The strategy artifact: YAML file, schema and invariants, typed policy view, and reviewable diffs."""
