"""Phase marks, step timers and profiler sessions: the only code runners use to mark time."""
