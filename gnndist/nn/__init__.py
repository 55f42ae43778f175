"""TODO placeholder."""
