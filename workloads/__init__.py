"""Workloads: one spec per model, built the same way in every framework, and their runners."""
