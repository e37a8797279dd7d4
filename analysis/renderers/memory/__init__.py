"""Memory views beside the time views: the breakdown's peak column, the compare's memory lead."""
