# Template-owned: `copier update` replaces this file; put your code in tools/.
"""Kept so that code written against template 0.2 and older still imports: use `<package>.core`."""

from . import ResilientServer

__all__ = ["ResilientServer"]
