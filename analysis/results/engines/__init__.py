"""Engines that run a job's per-rank work: the local process pool, a Dask or a Ray cluster."""
