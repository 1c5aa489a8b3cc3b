"""Tests of the shipped spec/ package (laws, statistics, mutants) and of the reference against it."""
