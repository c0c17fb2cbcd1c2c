"""A stand-in for a generated project, served by the library in its own tests."""
