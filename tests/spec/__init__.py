"""Tests of the shipped spec/ package's own machinery (laws, statistics, mutants, merge, the report);
a test of a reference/ module is tests/test_<module>.py (tests/README.md)."""
