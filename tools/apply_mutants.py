"""Apply hand-written mutants to the library, one at a time, and check that the tests named for
each one kill it.

    python tools/apply_mutants.py        (from the repository root)

Each mutant is a small, plausible bug (a missing 1/keep_prob in stochastic depth, a grid built
in the wrong axis order, a checkpoint wrapper left unwrapped, ...) on a path the suite must
cover.  For each of the eight below, the script writes the mutant into the library file,
runs the named test with pytest (it must fail), and restores the file, also on an error or
Ctrl-C.  Then it runs the named tests on the unmutated library (they must pass).  Exit status
0: every mutant killed and the unmutated library passes.  It edits files in place, so run it on
a clean working tree; it is not part of the pytest suite.
"""
import os
import subprocess
import sys

# (title, file, text, mutated text, the test that must kill it)
MUTANTS = [
    ("DropPath without 1/keep_prob", "vit_scratch/torch_nn/layers.py",
     ".bernoulli_(keep).div_(keep)", ".bernoulli_(keep)",
     "tests/test_families.py::test_drop_path_scales_kept_samples_by_one_over_keep_prob"),
    ("DropPath per element", "vit_scratch/torch_nn/layers.py",
     "shape = (x.shape[0],) + (1,) * (x.ndim - 1)", "shape = x.shape",
     "tests/test_families.py::test_drop_path_drops_whole_samples"),
    ("pos dropout before pos_embed, class token skipped", "vit_scratch/torch_nn/vit.py",
     "return self.pos_drop(torch.cat([cls, x], dim=1) + self.pos_embed)",
     "return torch.cat([cls, self.pos_drop(x)], dim=1) + self.pos_embed",
     "tests/test_families.py::test_position_dropout_acts_on_the_sum_including_the_class_token"),
    ("pos_embed left at zero", "vit_scratch/torch_nn/vit.py",
     "        trunc_normal_(self.pos_embed, std=0.02)\n", "",
     "tests/test_families.py::test_position_embedding_is_initialised"),
    ("sin-cos grid, meshgrid in xy order", "vit_scratch/numpy_nn/patch_embed.py",
     'indexing="ij"', 'indexing="xy"',
     "tests/test_rooms.py::test_sincos_2d_axis_order_on_a_non_square_grid"),
    ("sin-cos grid, rows and columns swapped", "vit_scratch/numpy_nn/patch_embed.py",
     "[sincos_pos_embed_1d(rows.ravel(), embed_dim // 2, temperature),\n"
     "         sincos_pos_embed_1d(cols.ravel(), embed_dim // 2, temperature)]",
     "[sincos_pos_embed_1d(cols.ravel(), embed_dim // 2, temperature),\n"
     "         sincos_pos_embed_1d(rows.ravel(), embed_dim // 2, temperature)]",
     "tests/test_rooms.py::test_sincos_2d_axis_order_on_a_non_square_grid"),
    ("{'state_dict': ...} not unwrapped", "vit_scratch/weight_files.py",
     'for key in ("model", "state_dict"):', 'for key in ("model",):',
     "tests/test_checkpoints.py::test_state_dict_wrapper_is_unwrapped"),
    ("mask with more dims broadcast silently", "vit_scratch/validation/arrays.py",
     "ok = len(mask_shape) <= len(scores_shape) and all(", "ok = all(",
     "tests/test_bad_input.py::test_mask_with_more_dimensions_than_the_scores_is_refused"),
]


def pytest_summary(tests: list[str]) -> tuple[int, str]:
    """Run pytest on ``tests``; its exit status and its last line."""
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    # -n 0: one process (the suite's two-process default reports -x stops with another status)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p",
                          "no:cacheprovider", *tests], capture_output=True, text=True, env=env)
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    return run.returncode, lines[-1] if lines else run.stderr.strip()[-200:]


def main() -> int:
    killed_all = True
    for title, path, old, new, test in MUTANTS:
        with open(path) as f:
            source = f.read()
        if source.count(old) != 1:
            print(f"STALE    {title}: the text to mutate is no longer in {path} exactly once")
            killed_all = False
            continue
        try:
            with open(path, "w") as f:
                f.write(source.replace(old, new))
            status, last = pytest_summary([test])
        finally:
            with open(path, "w") as f:
                f.write(source)
        killed = status == 1 and "failed" in last
        killed_all &= killed
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {title:50s} by {test.split('::')[1]}  [{last}]")
    status, last = pytest_summary(sorted({m[-1] for m in MUTANTS}))
    print(f"unmutated library, the {len(MUTANTS)} mutants' tests: [{last}]")
    return 0 if killed_all and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
