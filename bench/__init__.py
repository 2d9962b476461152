"""Benchmarks, run by hand: each prints a table of medians and ratios."""
