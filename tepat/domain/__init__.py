"""Domain rules: pure data and functions, no I/O."""
