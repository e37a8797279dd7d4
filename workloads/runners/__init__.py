"""One run in its own process: the per-framework training loops, their data pipelines and the after-run views."""
