"""Grade submissions with the hidden tests (instructors): ``python -m exercises.grade --help``.

The judge lives in ``exercises/grader/`` (docs/instructors.md). This command imports it from its
source, never from a bytecode file of the repository: its modules' bytecode goes to a private
folder (``sys.pycache_prefix``), so a ``.pyc`` planted in the repository is never run by the
grader (and is named, and refused, before grading starts).
"""
import shutil
import sys
import tempfile


def main() -> int:
    import numpy  # noqa: F401 - a library, from its own bytecode, before the private folder

    bytecode = tempfile.mkdtemp(prefix="vit-scratch-grader-bytecode-")
    previous, sys.pycache_prefix = sys.pycache_prefix, bytecode
    try:
        from exercises.grader.grade import main as grade
    finally:
        sys.pycache_prefix = previous
    try:
        return grade(bytecode=bytecode)
    finally:
        shutil.rmtree(bytecode, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # python -m exercises.grade | head
        sys.stderr.close()
        sys.exit(0)
