"""The evidence behind a compared pair's deltas: what each run measured, side by side."""
