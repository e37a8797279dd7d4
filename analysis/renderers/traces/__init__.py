"""A trace re-drawn with gapscope's phases: Chrome trace-event JSON and XSpace for XProf."""
