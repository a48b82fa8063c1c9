"""Exercises for the notebooks.  Edit the ``exNN_*.py`` files; check with ``pytest exercises``."""
