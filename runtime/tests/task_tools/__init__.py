"""Tools that run as durable tasks, for the tasks tests (tests/test_tasks.py)."""
