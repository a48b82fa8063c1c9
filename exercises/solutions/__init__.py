"""Reference solutions of the exercises (instructors only: ``python -m exercises.release`` leaves
this folder out of the student copy).  Each module is the master copy of its exercise file: the
student stub ``exercises/exNN_<topic>.py`` is this file with every ``### BEGIN SOLUTION`` ...
``### END SOLUTION`` region replaced by a ``raise NotImplementedError``."""
