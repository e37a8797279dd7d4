"""Memory figures read off a run: per step and phase from the allocator's events, allocation sites, creep, RSS."""
