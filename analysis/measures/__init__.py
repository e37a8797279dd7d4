"""Figures read off one run's model: kernels, collectives, transfers, the other split, clocks, resources, statistics."""
