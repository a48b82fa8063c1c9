"""Exercises for the notebooks.

Learners: edit ``exercises/exNN_<topic>.py`` where it says ``TODO Exercise N.M``, then check with
``python -m exercises.check NN`` (or ``pytest exercises``). Instructors: ``python -m exercises.release``
writes the student copy, ``python -m exercises.grade`` grades with the hidden tests (docs/instructors.md).
"""
