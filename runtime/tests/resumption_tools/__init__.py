"""Tools for the resumption tests, joined to tools/ by launch_with_tools.py."""
