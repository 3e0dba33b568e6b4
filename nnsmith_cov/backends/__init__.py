"""Compilers under test behind one interface."""
