"""Callbacks that make a trainer's fit (Lightning, Hugging Face Trainer) a gapscope run directory."""
