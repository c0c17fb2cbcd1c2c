"""Task bodies for the tests of tasks that outlive a process or move between replicas."""
