"""Helpers shared by the test modules (imported as ``support.*``; tests/conftest.py puts tests/ on sys.path)."""
