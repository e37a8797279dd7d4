"""gapscope's TensorBoard plugin: breakdown, steps and compare views of the runs in the logdir."""
