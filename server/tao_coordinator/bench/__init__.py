"""Benchmarks behind `tao bench …`: they print figures and write JSON; no test asserts on their timings."""
