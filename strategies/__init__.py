"""strategies package."""
