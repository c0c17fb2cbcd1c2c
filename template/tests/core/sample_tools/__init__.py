# Template-owned: `copier update` replaces this file; put your tests in tests/tools/.
"""Tools that fail in every way a tool can, for the core's tests."""
