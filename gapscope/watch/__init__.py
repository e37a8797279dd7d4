"""`gapscope watch`: a run's steps followed as its steps.csv grows, refreshed in the terminal."""
