"""Helper programs and utilities for the test suite."""
