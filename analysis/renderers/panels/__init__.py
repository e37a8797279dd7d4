"""The layers and compile views as the report writes them: Markdown tables and the per-layer plot."""
