"""Symbolic tensors, dtypes, the choice source and the operator-spec base."""
