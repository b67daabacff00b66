"""Courant's Python client."""
from ._courant import __version__

__all__ = ["__version__"]
