"""The package version (read by setuptools and written into exports)."""

__version__ = "0.1.0"
