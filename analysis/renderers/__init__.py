"""Renderers: turn analyzer results into text; they never read files and never analyse."""
