"""Model builders: one module per workload, with a builder for each framework."""
