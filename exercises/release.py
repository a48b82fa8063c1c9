"""Write the student copy of the repository (instructors): ``python -m exercises.release OUT_DIR``.

The code lives in ``exercises/grader/release.py`` (docs/instructors.md).
"""
import sys

from exercises.grader.release import main

if __name__ == "__main__":
    sys.exit(main())
