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
* ``"distillation"``: ``bench_distillation.py --json``, a student on the digits with and without
  a teacher (DeiT's hard distillation), over several seeds.
* ``"drop_path"``: ``bench_drop_path.py --json``, a deep, narrow ViT on the digits at several
  stochastic-depth rates, over several seeds.
"""
from __future__ import annotations

import argparse
import json
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
    return f"{value:+.2f}".replace("-", "\u2212")


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
        if "epochs" in entry["train_changes"]:
            command = f"`--model {name} --epochs {entry['epochs']}`"
        else:
            command = f"`--model {name}` ({entry['epochs']} epochs)"
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


def distillation_table(data: dict) -> str:
    """The with/without-teacher table (Markdown) of a results file."""
    seeds = len(data["settings"]["seeds"])
    lines = [f"| {data['settings']['student']['model']} ({seeds} seeds) | test accuracy | "
             f"agrees with the teacher | CPU s |", "|---|---|---|---|"]
    for name, entry in data["conditions"].items():
        lines.append(f"| {name} | {percent(entry['test_accuracy'])} | "
                     f"{percent(entry['agreement_with_teacher'])} | "
                     f"{entry['cpu_seconds']['mean']:.0f} ± {entry['cpu_seconds']['std']:.0f} |")
    teacher = data["teacher"]
    lines.append(f"| teacher: {data['settings']['teacher']['model']} | "
                 f"{percent(teacher['test_accuracy'])} | — | "
                 f"{teacher['cpu_seconds']['mean']:.0f} ± {teacher['cpu_seconds']['std']:.0f} |")
    return "\n".join(lines)


def drop_path_table(data: dict) -> str:
    """The drop-path table (Markdown) of a results file."""
    s = data["settings"]
    lines = [f"| drop_path_rate p_L ({s['model_kwargs']['depth']} blocks of "
             f"{s['model_kwargs']['embed_dim']} channels, {len(s['seeds'])} seeds) | branches run "
             f"(of {2 * s['model_kwargs']['depth']}) | test accuracy | last epoch's train "
             f"accuracy | CPU s |", "|---|---|---|---|---|"]
    for entry in data["rates"].values():
        lines.append(f"| {entry['drop_path_rate']} | {entry['expected_branches']:.1f} | "
                     f"{percent(entry['test_accuracy'])} | "
                     f"{percent(entry['last_train_accuracy'])} | "
                     f"{entry['cpu_seconds']['mean']:.0f} ± {entry['cpu_seconds']['std']:.0f} |")
    return "\n".join(lines)


TABLES = {"digits": digits_table, "models": models_table, "attention": attention_table,
          "distillation": distillation_table, "drop_path": drop_path_table}


def table(path) -> str:
    data = load(path)
    return TABLES[data["benchmark"]](data)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="a file under benchmarks/results/")
    args = parser.parse_args(argv)
    print(table(args.results))


if __name__ == "__main__":
    main()
