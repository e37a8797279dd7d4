"""The figures of the layers and compile views, computed once here for the report and the TensorBoard tab to draw."""
