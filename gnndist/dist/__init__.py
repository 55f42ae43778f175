"""The process layer: joining the job (join), the rank grid, its groups and collectives (grid), what keeps a job
from hanging or failing in silence (guards), host staging (staging), halo collectives (comm), timers (timing), the
cost probe (probe)."""
