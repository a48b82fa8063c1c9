"""The seven mutants that survived the suite before issue 10, applied one at a time.

    python tests/mutants_issue10.py        (from the repository root)

Each mutant is written into the library, its killing test (tests/test_mutation_gaps.py) is run
and must fail, and the file is restored (also on an error).  Exit status 0: every mutant killed.
Not collected by pytest (the name does not start with test_).
"""
import subprocess, sys, os
MUTANTS = [
    ("DropPath without 1/keep_prob", "vit_scratch/torch_nn/layers.py",
     ".bernoulli_(keep).div_(keep)", ".bernoulli_(keep)",
     "tests/test_mutation_gaps.py::test_drop_path_scales_kept_samples_by_one_over_keep_prob"),
    ("DropPath per element", "vit_scratch/torch_nn/layers.py",
     "shape = (x.shape[0],) + (1,) * (x.ndim - 1)", "shape = x.shape",
     "tests/test_mutation_gaps.py::test_drop_path_drops_whole_samples"),
    ("pos dropout before pos_embed, class token skipped", "vit_scratch/torch_nn/vit.py",
     "return self.pos_drop(torch.cat([cls, x], dim=1) + self.pos_embed)",
     "return torch.cat([cls, self.pos_drop(x)], dim=1) + self.pos_embed",
     "tests/test_mutation_gaps.py::test_position_dropout_acts_on_the_sum_including_the_class_token"),
    ("pos_embed left at zero", "vit_scratch/torch_nn/vit.py",
     "        trunc_normal_(self.pos_embed, std=0.02)\n", "",
     "tests/test_mutation_gaps.py::test_position_embedding_is_initialised"),
    ("sin-cos grid, meshgrid in xy order", "vit_scratch/numpy_nn/patch_embed.py",
     'indexing="ij"', 'indexing="xy"',
     "tests/test_mutation_gaps.py::test_sincos_2d_axis_order_on_a_non_square_grid"),
    ("sin-cos grid, rows and columns swapped", "vit_scratch/numpy_nn/patch_embed.py",
     "[sincos_pos_embed_1d(rows.ravel(), embed_dim // 2, temperature),\n         sincos_pos_embed_1d(cols.ravel(), embed_dim // 2, temperature)]",
     "[sincos_pos_embed_1d(cols.ravel(), embed_dim // 2, temperature),\n         sincos_pos_embed_1d(rows.ravel(), embed_dim // 2, temperature)]",
     "tests/test_mutation_gaps.py::test_sincos_2d_axis_order_on_a_non_square_grid"),
    ("{'state_dict': ...} not unwrapped", "vit_scratch/weights.py",
     'for key in ("model", "state_dict"):', 'for key in ("model",):',
     "tests/test_mutation_gaps.py::test_state_dict_wrapper_is_unwrapped"),
    ("mask with more dims broadcast silently", "vit_scratch/validation.py",
     "ok = len(mask_shape) <= len(scores_shape) and all(", "ok = all(",
     "tests/test_mutation_gaps.py::test_mask_with_more_dimensions_than_the_scores_is_refused"),
]
env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
ok = True
for title, path, old, new, test in MUTANTS:
    src = open(path).read()
    assert src.count(old) == 1, (title, src.count(old))
    open(path, "w").write(src.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
                           capture_output=True, text=True, env=env)
        last = [l for l in r.stdout.splitlines() if l.strip()][-1]
        killed = r.returncode == 1 and "failed" in last
        ok &= killed
        print(f"{'KILLED ' if killed else 'SURVIVED'} {title:50s} by {test.split('::')[1]}  [{last}]")
    finally:
        open(path, "w").write(src)
# and the unmutated code passes them all
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_mutation_gaps.py"],
                   capture_output=True, text=True, env=env)
print("unmutated:", [l for l in r.stdout.splitlines() if l.strip()][-1])
sys.exit(0 if ok else 1)
