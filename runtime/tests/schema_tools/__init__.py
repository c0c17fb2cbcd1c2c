"""Tools with declared input schemas and mirrored headers, joined to tools/ by launch_with_tools.py."""
