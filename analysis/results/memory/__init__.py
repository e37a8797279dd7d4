"""Memory beside time: a run's memory figures, and the memory gap between runs."""
