"""Tools that fail in every way a tool can, for the core's tests."""
