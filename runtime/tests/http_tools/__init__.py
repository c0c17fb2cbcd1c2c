"""Tools for the HTTP tests, joined to tools/ by launch_with_tools.py."""
