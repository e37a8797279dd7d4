"""On-demand capture: a running job traces its next N steps when `gapscope capture --pid` asks."""
