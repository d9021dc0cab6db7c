"""Core operations, one per module; commands call these and render what they return."""
