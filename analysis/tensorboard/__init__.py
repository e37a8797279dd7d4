"""TensorBoard: the server, gapscope's plugin, and the summaries and XSpace views written into run directories."""
