"""Coverage of the systems under test: collectors, the branch universe, maps and filters."""
