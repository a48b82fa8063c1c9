"""The judge: grading with the hidden tests, for instructors (``python -m exercises.grade``).

The trusted side of the trust boundary, in this folder: the command (:mod:`.grade`), the
grading run (:mod:`.grading`), what a hidden test is written with (:mod:`.judge`,
:mod:`.remote`), the channel to each exercise's process (:mod:`.session`), its sandbox
(:mod:`.bubblewrap`) and what the sandbox holds (:mod:`.views`), a submission
(:mod:`.submission`), the integrity of these files (:mod:`.integrity`), the student copy
(:mod:`.release`), and the hidden tests (``hidden/``). What runs inside the sandbox, next to a
submission, is in ``sandbox/``; the grader's own test fixtures (hostile submissions, mutants,
the proof) are in ``fixtures/``. The release leaves ``hidden/`` and ``fixtures/`` out.
See docs/instructors.md.
"""
