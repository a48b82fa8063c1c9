"""The Markdown tables that README.md and docs/ show, printed from the benchmark results files.

    python benchmarks/tables.py benchmarks/results/digits.json

Every number that README.md, docs/ or a notebook quotes from a benchmark lives in one file under
``benchmarks/results/``, written by the benchmark script with ``--json``. A page shows such a table
below a comment that names this command; ``tests/test_docs_consistency.py`` runs the command and
checks that the page shows exactly what it prints. So after re-running a benchmark, paste this
command's output into the page and nothing else changes by hand.

Each results file says what it holds in its ``"benchmark"`` field:

* ``"digits"``: ``bench_digits.py --json``, the small models on scikit-learn's digits over
  several random train/test splits, beside an SVC.
* ``"models"``: ``bench_models.py --json``, ours against timm, NumPy against PyTorch.
* ``"attention"``: ``bench_attention.py --json``, the attention kernels as the tokens grow.
* ``"install"``: ``bench_install.py --json``, what the extras add in fresh environments.
* ``"vit_data_scaling"``, ``"cait"``, ``"coat"``, ``"attention_localisation"``: the experiment
  scripts ``exp_*.py`` (the papers' claims in miniature, mean ± std over seeds); ``--part``
  picks one table of a file that has several.
* ``"small_folder"``: ``bench_small_folder.py --json``, the trainer's recipes on a small folder of
  pictures over three seeds, beside the linear baseline and an SVM.
* ``"workers"``: ``bench_workers.py --json``, seconds per epoch with fork and spawn workers.
* ``"distillation"``: ``bench_distillation.py --json``, students on the digits with and without
  a teacher that knows more (DeiT's soft and hard distillation, a class-swapping teacher as the
  positive control), over several seeds.
* ``"drop_path"``: ``bench_drop_path.py --json``, a deep, narrow ViT on the digits at several
  stochastic-depth rates, over several seeds.
* ``"timm_suite"``: ``tools/timm_suite.py --full --json``, timm's own test_models.py on every
  name both libraries have: the table timm test × family (``timm_suite.markdown``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path) -> dict:
    """A results file, with its kind in ``data["benchmark"]``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list) or "fwd_bwd_ms_timm" in data:  # bench_models.py writes bare results
        data = {"benchmark": "models", "results": data if isinstance(data, list) else [data]}
    elif "rows" in data and "benchmark" not in data:  # bench_attention.py
        data = dict(data, benchmark="attention")
    return data


def percent(stat: dict) -> str:
    return f"{100 * stat['mean']:.2f} ± {100 * stat['std']:.2f} %"


def signed(value: float) -> str:
    """``+0.12`` or ``−0.12`` (a true minus sign, as in the tables)."""
    text = f"{value:+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text.replace("-", "\u2212")


def epoch_cost(data: dict, name: str, relative_to: str = "vit_digits") -> float:
    """CPU seconds per epoch of ``name`` over those of ``relative_to`` (mean over the splits)."""
    models = data["models"]
    per_epoch = {n: models[n]["cpu_seconds"]["mean"] / models[n]["epochs"]
                 for n in (name, relative_to)}
    return per_epoch[name] / per_epoch[relative_to]


def digits_table(data: dict) -> str:
    """README's table of the four small models on digits."""
    models, svc = data["models"], data["svc"]
    best = max(entry["test_accuracy"]["mean"] for entry in models.values())
    lines = ["| model | command | parameters | test accuracy (mean ± std) | vs SVC, same split "
             "| training, CPU s |",
             "|---|---|---|---|---|---|"]
    for name, entry in models.items():
        options = "".join(f" --{key.replace('_', '-')} {value}"
                          for key, value in entry["train_changes"].items() if key != "epochs")
        if "epochs" in entry["train_changes"]:
            command = f"`--model {name}{options} --epochs {entry['epochs']}`"
        else:
            command = f"`--model {name}{options}` ({entry['epochs']} epochs)"
        accuracy = percent(entry["test_accuracy"])
        if entry["test_accuracy"]["mean"] == best:
            accuracy = f"**{accuracy}**"
        vs, cpu = entry["vs_svc"], entry["cpu_seconds"]
        lines.append(f"| `{name}` | {command} | {entry['params']:,} | {accuracy} "
                     f"| {signed(100 * vs['mean'])} ± {100 * vs['std']:.2f} "
                     f"| {cpu['mean']:.0f} ± {cpu['std']:.0f} |")
    lines.append(f"| SVC, RBF kernel on the 64 pixels | -- | -- | {percent(svc['test_accuracy'])} "
                 f"| -- | {svc['cpu_seconds']['mean']:.1f} |")
    return "\n".join(lines)


def models_table(data: dict) -> str:
    """docs/speed.md's table: ours against timm (fwd+bwd), NumPy against PyTorch (fwd)."""
    lines = ["| model | fwd+bwd ms, timm | fwd+bwd ms, ours | ours / timm | fwd ms, NumPy "
             "| fwd ms, PyTorch | NumPy / PyTorch |",
             "|---|---|---|---|---|---|---|"]
    for r in data["results"]:
        cells = [r["model"], f"{r['fwd_bwd_ms_timm']:.0f}", f"{r['fwd_bwd_ms_ours']:.0f}",
                 f"{r['fwd_bwd_ratio_ours_over_timm']:.2f}"]
        cells += ([f"{r['fwd_ms_numpy']:.0f}", f"{r['fwd_ms_torch_cpu']:.0f}",
                   f"{r['fwd_ratio_numpy_over_torch']:.2f}"] if "fwd_ms_numpy" in r
                  else ["--"] * 3)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _mb(value: float) -> str:
    if value == 0:
        return "none kept"
    return f"{value:.2f} MB" if value < 1 else f"{value:.0f} MB"


# bench_attention.py's kernel names, and what each stands for
LABELS = {"self-attention (fused)": "self-attention, fused (ViT)",
          "self-attention (explicit)": "self-attention, explicit (ViT, `get_attention_maps`)",
          "talking heads": "talking heads (CaiT's patch stage)",
          "class attention": "class attention (CaiT's last stage)",
          "factorized": "factorized (CoaT)"}


def attention_table(data: dict) -> str:
    """docs/speed.md's table: ms per call of each attention kernel as the tokens grow."""
    rows = data["rows"]
    tokens = sorted({r["N"] for r in rows})
    lines = ["| room | kernel | " + " | ".join(f"N={n}" for n in tokens)
             + f" | largest intermediate at N={tokens[-1]} |",
             "|---|---|" + "---|" * (len(tokens) + 1)]
    seen = []
    for r in rows:
        if (r["room"], r["kernel"]) not in seen:
            seen.append((r["room"], r["kernel"]))
    for room, kernel in seen:
        mine = {r["N"]: r for r in rows if r["room"] == room and r["kernel"] == kernel}
        lines.append(f"| {room} | {LABELS.get(kernel, kernel)} | " + " | ".join(_ms(mine[n]["ms"]) for n in tokens)
                     + f" | {_mb(mine[tokens[-1]]['intermediate_MB'])} |")
    return "\n".join(lines)


def small_folder_table(data: dict) -> str:
    """docs/training.md's and the README's table: each folder, each recipe's test accuracy over
    the seeds beside the convnet yardstick and the linear baseline on the same splits, and the
    recipe's paired difference from the convnet (95% t interval over the seeds)."""
    def accuracy(stat):  # one seed has no spread
        return percent(stat) if stat["n"] > 1 else f"{100 * stat['mean']:.2f} %"

    lines = ["| folder (train / val / test) | recipe | seeds | test accuracy (mean ± std) "
             "| lowest | recipe − convnet, points (95% CI) | training, CPU s | convnet "
             "| linear baseline |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, f in data["folders"].items():
        images = f["images"]
        for name, r in f["recipes"].items():
            acc, diff = r["test_accuracy"], r.get("minus_convnet")
            gap = (f"{100 * diff['mean']:+.1f} ({100 * diff['low']:+.1f} to "
                   f"{100 * diff['high']:+.1f})" if diff else "—")
            lines.append(f"| {kind} ({images['train']} / {images['val']} / {images['test']}) "
                         f"| {name} | {acc['n']} | {accuracy(acc)} | {100 * acc['min']:.1f} % "
                         f"| {gap} "
                         f"| {r['cpu_seconds']['mean']:.0f} "
                         f"| {accuracy(f['convnet']) if f['convnet'] else '—'} "
                         f"| {accuracy(f['linear'])} |")
    return "\n".join(lines)


def _vs(runs: list[dict], base: list[dict], metric: str = "test_accuracy") -> str:
    """``a − b`` in points, paired by seed, with its 95% t interval (``stats.paired``)."""
    import stats  # benchmarks/stats.py, beside this file

    if len(runs) < 2:
        return "—"
    iv = stats.paired(stats.by_seed(runs, metric), stats.by_seed(base, metric)).scaled(100)
    return f"{signed(iv.mean)} ({signed(iv.low)} to {signed(iv.high)})"


def distillation_table(data: dict) -> str:
    """bench_distillation.py: each student's test accuracy, its difference to the class token
    paired by seed (95% t interval), its agreement with the teacher; then the teacher."""
    s, conditions = data["settings"], data["conditions"]
    roles = {s["primary"]["a"]: "primary", s["positive_control"]["a"]: "positive control",
             s["primary"]["b"]: "baseline"}
    base = conditions[s["primary"]["b"]]["runs"]
    lines = [f"| {s['student']}, {s['n_train']} digits ({len(s['seeds'])} seeds) | contrast "
             f"| test accuracy | − {s['primary']['b']}, points (95% CI) | agrees with the "
             f"teacher | epoch selected |", "|---|---|---|---|---|---|"]
    for name, entry in conditions.items():
        vs = "—" if entry["runs"] is base else _vs(entry["runs"], base)
        lines.append(f"| {name} | {roles.get(name, 'secondary')} "
                     f"| {percent(entry['test_accuracy'])} | {vs} "
                     f"| {percent(entry['agreement_with_teacher'])} "
                     f"| {_pm(entry['selected_epoch'], 1, 0)} of {s['epochs']} |")
    t = data["teacher"]
    lines.append(f"| teacher: {s['teacher']}, {data['images']['teacher']:,} digits | — "
                 f"| {percent(t['test_accuracy'])} | — | its class is the label on "
                 f"{percent(t['labels_on_views'])} of the students' views "
                 f"| {_pm(t['selected_epoch'], 1, 0)} of {s['teacher_epochs']} |")
    return "\n".join(lines)


def drop_path_table(data: dict) -> str:
    """bench_drop_path.py: per variant the test accuracy, its difference to rate 0 paired by
    seed (95% t interval), the selected weights' training accuracy, and the branches run."""
    s, variants = data["settings"], data["variants"]
    base_name = s["primary"]["b"]
    base = variants[base_name]["runs"]
    roles = {s["primary"]["a"]: "primary", s["positive_control"]["a"]: "positive control",
             base_name: "baseline"}
    lines = [f"| {s['model_kwargs']['depth']} blocks of {s['model_kwargs']['embed_dim']} "
             f"channels, {s['n_train']} digits, no augmentation ({len(s['seeds'])} seeds) "
             f"| contrast | branches run (of {2 * s['model_kwargs']['depth']}) | test accuracy "
             f"| − {base_name}, points (95% CI) | training accuracy | epoch selected |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in variants.items():
        vs = "—" if name == base_name else _vs(entry["runs"], base)
        lines.append(f"| {name} | {roles.get(name, 'secondary')} "
                     f"| {entry['expected_branches']:.1f} | {percent(entry['test_accuracy'])} "
                     f"| {vs} | {percent(entry['train_accuracy'])} "
                     f"| {_pm(entry['selected_epoch'], 1, 0)} of {s['epochs']} |")
    return "\n".join(lines)


def workers_table(data: dict) -> str:
    """docs/training.md's table: seconds per epoch with DataLoader workers started by fork and
    by spawn, and without workers."""
    lines = ["| loading | workers | seconds per epoch | first epoch | later epochs |",
             "|---|---|---|---|---|"]
    for name, c in data["configs"].items():
        lines.append(f"| {name} | {c['workers']} | {c['seconds_per_epoch']:.2f} "
                     f"| {c['first_epoch_seconds']:.2f} | {c['later_epoch_seconds']:.2f} |")
    return "\n".join(lines)


def _pm(stat: dict, scale: float = 100, digits: int = 1) -> str:
    return f"{scale * stat['mean']:.{digits}f} ± {scale * stat['std']:.{digits}f}"


def _ci(interval: dict, scale: float = 100, digits: int = 1) -> str:
    """``+1.2 (−0.5 to +2.9)``: a paired difference with its 95% interval."""
    f = f"{{:+.{digits}f}}"
    text = (f"{f.format(scale * interval['mean'])} ({f.format(scale * interval['low'])} to "
            f"{f.format(scale * interval['high'])})")
    return text.replace("-", "\u2212")


def scaling_table(data: dict, part: str = "clutter") -> str:
    """exp_vit_data_scaling.py, one task: test accuracy (%) against the number of training
    canvases, the ViT minus the CNN with its 95% interval, and the slope of log test error
    against log n of each model (mean over the seeds, its 95% interval)."""
    names = {"vit": "ViT (`vit_digits`)", "cnn": "small CNN", "svm": "SVM on the pixels"}
    task = data["tasks"][part]
    models = [m for m in names if m in task["curves"]]
    sizes = sorted({int(n) for m in models for n in task["curves"][m]})
    gap = task["comparisons"].get("cnn")
    lines = ["| training canvases | " + " | ".join(names[m] for m in models)
             + (" | ViT − CNN, points (95% CI) |" if gap else " |"),
             "|---|" + "---|" * (len(models) + bool(gap))]
    for n in sizes:
        cells = [f"{_pm(task['curves'][m][str(n)])} %" for m in models]
        if gap:
            cells.append(_ci(gap["at"][str(n)]["interval"]))
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    if task["slopes"]:
        cells = [_ci(task["slopes"][m]["interval"], 1, 2) if m in task["slopes"] else "--"
                 for m in models]
        if gap:
            diff = task.get("slope_difference")
            cells.append(f"slopes: {_ci(diff['interval'], 1, 2)}" if diff else "--")
        lines.append("| slope of log error against log n (95% CI) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


FORM_NAMES = {"prenorm": "pre-norm", "rezero": "ReZero (α, no norm)",
              "prenorm_scalar": "α with norm", "layerscale": "LayerScale"}
INIT_NAMES = {"timm": "timm", "xavier": "Xavier", "small_tokens": "tiny tokens"}
PLACEMENT_NAMES = {"late": "class attention at the end (CaiT)",
                   "from_start": "class token from the start (ViT)",
                   "from_start_timm_talking_heads": "from the start, timm's talking heads "
                                                    "(positive control)"}


def _signed1(value: float) -> str:
    text = f"{value:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text.replace("-", "\u2212")


def _points(interval: dict) -> str:
    """An interval of fractions in points: ``+1.2 (−0.5 to +2.9)``."""
    return (f"{_signed1(100 * interval['mean'])} ({_signed1(100 * interval['low'])} to "
            f"{_signed1(100 * interval['high'])})")


def _p(value: float) -> str:
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def cait_table(data: dict, part: str = "depth") -> str:
    """exp_cait.py: test accuracy (%) of the selected epoch by depth and residual form, each
    form from its own initialisation at the learning rate chosen for it at that depth
    (``depth``); the class token
    late, from the start, and the positive control (``class_token``); the declared contrasts
    with their 95% intervals, paired by seed (``contrasts``)."""
    if part == "depth":
        d = data["depth"]
        summary, lrs = d["summary"], d["lr"]
        forms = list(summary)
        depths = sorted({int(n) for f in forms for n in summary[f]})
        init = data["settings"]["depth"]["init"]
        lines = ["| depth | " + " | ".join(f"{FORM_NAMES.get(f, f)}, {INIT_NAMES[init[f]]} init"
                                           for f in forms) + " |",
                 "|---|" + "---|" * len(forms)]

        def cell(f, n):  # "--": a form this depth does not run
            if str(n) not in summary[f]:
                return "--"
            return f"{_pm(summary[f][str(n)]['test_accuracy'])} % (lr {lrs[f][str(n)]:g})"

        for n in depths:
            lines.append(f"| {n} | " + " | ".join(cell(f, n) for f in forms) + " |")
        return "\n".join(lines)
    if part == "class_token":
        summary = data["class_token"]["summary"]
        lines = ["| the class token | talking heads start at | learning rate | test accuracy "
                 "| validation accuracy | parameters |", "|---|---|---|---|---|---|"]
        for key, entry in summary.items():
            lines.append(f"| {PLACEMENT_NAMES.get(key, key)} | {entry['talking_heads']} "
                         f"| {entry['lr']:g} | {_pm(entry['test_accuracy'])} % "
                         f"| {_pm(entry['val_accuracy'])} % | {entry['params']:,} |")
        return "\n".join(lines)
    if part != "contrasts":
        raise ValueError(f"part must be depth, class_token or contrasts, got {part!r}")
    lines = ["| contrast (test accuracy, paired by seed) | seeds | difference, points (95% CI) "
             "| p | smallest detectable, points |", "|---|---|---|---|---|"]

    def row(name, c, note=""):
        iv = c["interval"]
        lines.append(f"| {name} | {iv['n']} | {_points(iv)} | {_p(iv['p_value'])}{note} "
                     f"| {100 * c['detectable']:.1f} |")

    if "depth" in data:
        d, s = data["depth"], data["settings"]["depth"]
        p, c = s["primary"], s["control"]
        row(f"**primary**: LayerScale − pre-norm, depth {p['depth']}", d["primary"])
        if d.get("positive_control"):
            row(f"positive control: LayerScale − pre-norm, tiny tokens, depth {c['depth']}",
                d["positive_control"])
        for name, entry in d["secondary_holm"].items():
            form, depth = name.split(" − ")[1].split(" @ ")
            row(f"LayerScale − {FORM_NAMES.get(form, form)}, depth {depth}", entry,
                " (Holm: " + ("yes" if entry["holm_rejected"] else "no") + ")")
        for depth, entry in d["rezero_above_chance"].items():
            iv = entry["interval"]
            lines.append(f"| ReZero − chance (10%), depth {depth} | {iv['n']} | {_points(iv)} "
                         f"| {_p(iv['p_value'])} (Holm: "
                         f"{'yes' if entry['holm_rejected'] else 'no'}) | -- |")
    if "class_token" in data:
        c = data["class_token"]
        row("**primary**: class token late − from the start, talking heads at the identity",
            c["primary"])
        row("positive control: from the start, talking heads at the identity − at timm's",
            c["positive_control"])
    return "\n".join(lines)


COAT_NAMES = {"both": "CRPE + CPE", "no_crpe": "CPE only", "no_cpe": "CRPE only",
              "none": "neither"}


def coat_table(data: dict, part: str = "positions") -> str:
    """exp_coat.py: CRPE and CPE on and off on the left-digit task (test accuracy, %, on all
    test canvases, the side-by-side ones and the stacked ones) with the negative control; the
    contrasts with their intervals; or the two parallel variants."""
    if part == "parallel":
        names = {"interpolation": "feature interpolation",
                 "cross_attention": "cross-layer attention"}
        summary = data["parallel"]["summary"]
        lines = ["| parallel blocks | test accuracy | validation accuracy | parameters trained |",
                 "|---|---|---|---|"]
        for name, entry in summary.items():
            lines.append(f"| {names.get(name, name)} | {_pm(entry['test_accuracy'], digits=2)} % "
                         f"| {_pm(entry['val_accuracy'], digits=2)} % "
                         f"| {entry['trained_params']:,} |")
        return "\n".join(lines)
    positions = data["positions"]
    if part == "contrasts":
        c = positions["contrasts"]
        rows = [("primary: CRPE + CPE − neither", c["primary"], ""),
                ("positive control: the same, side-by-side canvases", c["positive_control"], ""),
                ("the same, stacked canvases", c["stacked"], "")]
        rows += [(f"{name}: {COAT_NAMES[v['a']]} − {COAT_NAMES[v['b']]}", v,
                  "yes" if v["holm_rejected"] else "no") for name, v in c["secondary"].items()]
        if "negative_control" in c:
            rows.append(("negative control (brighter digit): CRPE + CPE − neither",
                         c["negative_control"], ""))
        lines = ["| contrast (test accuracy, paired by seed) | points (95% CI) | p | "
                 "detectable, points | Holm: an effect |", "|---|---|---|---|---|"]
        for name, v, holm in rows:
            lines.append(f"| {name} | {_ci(v['interval'])} | {v['interval']['p_value']:.3f} | "
                         f"{100 * v['detectable_effect']:.1f} | {holm or '--'} |")
        return "\n".join(lines)
    left = positions["summary"]["left"]
    control = positions["summary"].get("brighter")
    lines = ["| position encodings | learning rate | left digit: test accuracy | side by side "
             "| stacked |" + (" brighter digit (control) |" if control else "")
             + " selected epoch | parameters trained |",
             "|---|---|---|---|---|" + ("---|" if control else "") + "---|---|"]
    for name, entry in left.items():
        ctrl = ""
        if control:
            ctrl = (f" {_pm(control[name]['test_accuracy'])} % |" if name in control
                    else " -- |")
        lines.append(f"| {COAT_NAMES.get(name, name)} | {entry['lr']:g} "
                     f"| {_pm(entry['test_accuracy'])} % "
                     f"| {_pm(entry['test_accuracy_side_by_side'])} % "
                     f"| {_pm(entry['test_accuracy_stacked'])} % |{ctrl} "
                     f"{entry['selected_epoch']['mean']:.1f} of "
                     f"{positions['runs'][0]['epochs']} | {entry['trained_params']:,} |")
    return "\n".join(lines)


def localisation_table(data: dict) -> str:
    """exp_attention_localisation.py: the share of each view's weight in the boxes (%)."""
    lines = ["| model | view | test accuracy | in the true box | on the distractor | × chance "
             "| ink map, true box | untrained, true box |",
             "|---|---|---|---|---|---|---|---|"]
    for kind, entry in data["summary"].items():
        for view, v in entry["views"].items():
            lines.append(f"| {kind} | {view} | {_pm(entry['test_accuracy'])} % "
                         f"| {_pm(v['true_box'])} % | {_pm(v['distractor_box'])} % "
                         f"| {v['ratio_to_chance']['mean']:.1f} | {_pm(entry['ink_true_box'])} % "
                         f"| {_pm(v['untrained_true_box'])} % |")
    return "\n".join(lines)


def install_table(data: dict) -> str:
    """bench_install.py: what each extra adds to PyTorch's CPU build in a fresh environment."""
    lines = ["| install | packages added | MB added | MB in all (with PyTorch's CPU build) "
             "| wall time, s |", "|---|---|---|---|---|"]
    for run in data["runs"]:
        lines.append(f"| `pip install \".[{run['extra']}]\"` | {run['added_packages']} "
                     f"| {run['added_MB']:.0f} | {run['total_MB']:,.0f} | {run['install_seconds']:.0f} |")
    return "\n".join(lines)


def timm_suite_table(data: dict) -> str:
    """timm's own tests on vit-scratch, test × family (``tools/timm_suite.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools import timm_suite

    return timm_suite.markdown(data)


TABLES = {"digits": digits_table, "install": install_table, "models": models_table,
          "attention": attention_table, "small_folder": small_folder_table,
          "workers": workers_table, "vit_data_scaling": scaling_table, "cait": cait_table,
          "coat": coat_table, "attention_localisation": localisation_table,
          "distillation": distillation_table, "drop_path": drop_path_table,
          "timm_suite": timm_suite_table}


def table(path, part: str | None = None) -> str:
    data = load(path)
    make = TABLES[data["benchmark"]]
    return make(data) if part is None else make(data, part)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="a file under benchmarks/results/")
    parser.add_argument("--part", help="the table of a file that has several: depth, class_token "
                                       "or contrasts (cait.json), positions, contrasts or parallel "
                                       "(coat.json), clutter or relational (vit_data_scaling.json)")
    args = parser.parse_args(argv)
    print(table(args.results, args.part))


if __name__ == "__main__":
    main()
