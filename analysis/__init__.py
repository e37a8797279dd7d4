"""Readers turn trace files into one neutral event model; analyzers turn that into results."""
