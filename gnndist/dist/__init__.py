"""The process layer: the rank grid and its groups (grid), halo collectives (comm), timers (timing), the cost
probe (probe)."""
