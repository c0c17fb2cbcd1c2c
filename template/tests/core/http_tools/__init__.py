# Template-owned: `copier update` replaces this file; put your tests in tests/tools/.
"""Tools for the HTTP tests, joined to tools/ by launch_with_tools.py."""
