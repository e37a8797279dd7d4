"""Benchmarks of gapscope itself: trace parsing speed and the overhead of phase marks."""
