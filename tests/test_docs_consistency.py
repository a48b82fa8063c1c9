"""README.md, docs/*.md and the notebooks' markdown name only what exists, hold no control
characters, and quote benchmark numbers from the one file that holds them.

The checker is docs/doccheck.py (also a command: ``python docs/doccheck.py``); the planted
mistakes below prove that it finds each kind of problem."""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import runpy
import shlex
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


doccheck = load(ROOT / "docs" / "doccheck.py", "doccheck")
tables = load(ROOT / "benchmarks" / "tables.py", "tables")
PAGES = doccheck.markdown_pages()
DIGITS = tables.load(ROOT / "benchmarks" / "results" / "digits.json")


def page_text(name: str) -> str:
    """The page's text with every run of white space (line breaks too) made one space."""
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


# --- every page names what exists ------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_names_only_what_exists(page):
    problems = doccheck.page_problems(page)
    assert not problems, "\n".join(problems)


def test_pages_cover_readme_docs_and_every_notebook():
    names = {p.name for p in PAGES}
    assert "README.md" in names and "docs/glossary.md" in names
    assert {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")} <= names


PLANTED = """# A page with mistakes

Run `pytest exercises/test_ex04_missing.py`, then `python -m exercises.nothing 04`.
See [the glossary](glossary.md#no-such-term) and [a page](missing_page.md).

```bash
python benchmarks/no_such_bench.py --json x.json
pip install -e ".[nonexistent]"
jupyter lab notebooks_old/
```

The class token\tbreaks $\\top$ here. The module is `vit_scratch/nothing_here.py`.

Fine: `runs/coat_digits/`, `my_pictures/cat/*.png`, `.../coat.py`, `numpy_nn/attention.py`,
[the paper](https://arxiv.org/abs/2010.11929), [LayerScale](glossary.md#layerscale),
`python -m vit_scratch.train --help`, `pytest exercises`, `pip install -r requirements.txt`,
`exercises/exNN_<topic>.py`.
"""


def test_checker_finds_each_planted_mistake():
    page = doccheck.Page(ROOT / "docs" / "planted.md", PLANTED)
    problems = "\n".join(doccheck.page_problems(page))
    expected = ["exercises/test_ex04_missing.py", "no module exercises.nothing",
                "glossary.md#no-such-term: no such heading", "missing_page.md: no such file",
                "no file benchmarks/no_such_bench.py", "declares no extra [nonexistent]",
                "notebooks_old/", "control character '\\t'", "vit_scratch/nothing_here.py"]
    for mistake in expected:
        assert mistake in problems, f"not found: {mistake}\n{problems}"
    assert len(doccheck.page_problems(page)) == len(expected), problems


def test_checker_reads_notebook_cells_and_names_the_cell(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# Title\n"]},
             {"cell_type": "code", "source": ["pytest missing.py\n"], "outputs": []},
             {"cell_type": "markdown", "source": ["Run `pytest tests/test_gone.py`.\n"]}]
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    page = doccheck.notebook_page(path)
    page.path = ROOT / "notebooks" / "x.ipynb"
    assert doccheck.page_problems(page) == [
        "notebooks/x.ipynb cell 2: `pytest tests/test_gone.py`: no file or folder tests/test_gone.py"]


def test_slugs_match_the_site_and_github():
    assert doccheck.slug("LayerScale") == "layerscale"
    assert doccheck.slug("Talking-heads attention") == "talking-heads-attention"
    assert doccheck.slug("How we know it is right") == "how-we-know-it-is-right"
    assert doccheck.slug("`mkdocs build`: the site") == "mkdocs-build-the-site"


# --- every --option of our own commands exists -------------------------------------------------

class _Parsed(Exception):
    pass


def cli_options(kind: str, target: str) -> set[str]:
    """The option strings of the argparse parser that ``python -m target`` / ``python target``
    builds, read by stopping the program when it parses its arguments."""
    parsers = []

    def stop(self, args=None, namespace=None):
        parsers.append(self)
        raise _Parsed

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", stop), \
            mock.patch.object(sys, "argv", [target]), contextlib.suppress(_Parsed), \
            contextlib.redirect_stdout(io.StringIO()):
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=False)
        else:
            runpy.run_path(str(ROOT / target), run_name="__main__")
    assert parsers, f"{target} parsed no arguments"
    return set(parsers[0]._option_string_actions)


def our_commands():
    """{target: [(where, command)]} of the commands that run our code with ``--options``."""
    found = {}
    for page in PAGES:
        for command in doccheck.commands(page.text):
            target = doccheck.command_target(command.argv)
            if target is None or (target[0] == "module"
                                  and not doccheck.local_module(target[1])):
                continue
            if target[0] == "script" and not target[1].endswith(".py"):
                continue
            if not any(token.startswith("--") for token in command.argv[2:]):
                continue  # nothing to check, and a script is never run for nothing
            found.setdefault(target, []).append((page.where(command.line), command))
    return found


COMMANDS = our_commands()


@pytest.mark.parametrize("target", sorted(COMMANDS), ids=[t[1] for t in sorted(COMMANDS)])
def test_every_option_of_our_commands_exists(target):
    options = cli_options(*target)
    wrong = []
    for where, command in COMMANDS[target]:
        for token in command.argv[2:]:
            if token.startswith("--") and token.split("=")[0] not in options:
                wrong.append(f"{where}: `{command.text}`: {target[1]} has no option "
                             f"{token.split('=')[0]}")
    assert not wrong, "\n".join(wrong)


def test_commands_cover_the_pages_tools():
    names = {target for _, target in COMMANDS}
    assert {"vit_scratch.train", "benchmarks/bench_digits.py", "benchmarks/bench_models.py",
            "benchmarks/bench_attention.py"} <= names


# --- numbers from one source ---------------------------------------------------------------------

TABLE_MARK = re.compile(r"<!-- table: (python benchmarks/tables\.py [^>]+?) -->\n((?:\|.*\n?)+)")


def shown_tables():
    return [(page.name, m.group(1), m.group(2).rstrip("\n"))
            for page in PAGES if not page.cells for m in TABLE_MARK.finditer(page.text)]


def results_file(command: str) -> str:
    return next(token for token in command.split() if token.endswith(".json"))


def test_results_tables_are_printed_from_the_results_files():
    found = shown_tables()
    assert {(name, results_file(command)) for name, command, _ in found} >= {
        ("docs/results.md", "benchmarks/results/digits.json"),
        ("docs/speed.md", "benchmarks/results/models_2threads.json"),
        ("docs/speed.md", "benchmarks/results/models_1thread.json"),
        ("docs/speed.md", "benchmarks/results/attention.json")}
    for name, command, shown in found:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            tables.main(shlex.split(command)[2:])
        assert shown == printed.getvalue().rstrip("\n"), (
            f"{name}: the table below `{command}` is not what it prints; paste its output")


def test_every_results_file_is_shown():
    shown = {results_file(command) for _, command, _ in shown_tables()}
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks/results").glob("*.json")}
    assert files == shown


def test_digits_summary_agrees_with_itself():
    svc = DIGITS["svc"]["test_accuracy"]["mean"]
    for name, entry in DIGITS["models"].items():
        assert entry["vs_svc"]["mean"] == pytest.approx(entry["test_accuracy"]["mean"] - svc,
                                                        abs=1e-9), name
        runs = entry["runs"]
        if runs:  # written by bench_digits.py: the summary is the runs' mean
            assert entry["test_accuracy"]["mean"] == pytest.approx(
                sum(r["test_accuracy"] for r in runs) / len(runs))
            assert len(runs) == len(DIGITS["settings"]["seeds"])


def test_sentences_quote_the_digits_results():
    """What the README and results.md say about the table beyond its numbers (which factcheck
    finds in digits.json): which model is ahead, the range, and the ratios of epoch costs."""
    models = DIGITS["models"]
    readme, results = page_text("README.md"), page_text("docs/results.md")
    best = max(models, key=lambda n: models[n]["test_accuracy"]["mean"])
    means = sorted(100 * e["test_accuracy"]["mean"] for e in models.values())
    top = models[best]["test_accuracy"]
    assert (f"has `{best}` ahead at {100 * top['mean']:.2f} ± {100 * top['std']:.2f}% over five "
            f"splits") in readme
    assert f"reach {means[0]:.2f}-{means[-1]:.2f}%" in readme
    assert len(DIGITS["settings"]["seeds"]) == 5  # "five splits"
    svc = DIGITS["svc"]["test_accuracy"]["mean"]
    level = round(100 * top["mean"], 2) == round(100 * svc, 2)
    assert ("level with an SVM" in readme) == level and ("ties the SVM" in results) == level
    lite, full = (tables.epoch_cost(DIGITS, n) for n in ("coat_lite_digits", "coat_digits"))
    assert f"about {lite:.1f}× (CoaT-Lite) and {full:.1f}× (CoaT) a ViT epoch" in results


def test_sentences_quote_the_attention_results():
    rows = tables.load(ROOT / "benchmarks/results/attention.json")["rows"]
    largest = max(r["N"] for r in rows)
    ms = {r["kernel"]: r["ms"] for r in rows if r["N"] == largest and r["room"] == "torch"}
    saving = ms["self-attention (fused)"] / ms["factorized"]
    assert (f"factorized attention is {round(saving, -1):.0f}× cheaper"
            in page_text("docs/speed.md"))


def test_notebooks_quote_no_digits_result_in_prose():
    """Notebooks show the five-split results by reading benchmarks/results/digits.json."""
    values = {f"{100 * e['test_accuracy']['mean']:.2f}" for e in DIGITS["models"].values()}
    values.add(f"{100 * DIGITS['svc']['test_accuracy']['mean']:.2f}")
    quoted = [f"{page.where(i + 1)} quotes {v}"
              for page in PAGES if page.cells
              for i, line in enumerate(page.text.split("\n"))
              for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", line)]
    assert not quoted, "\n".join(quoted)


def test_reading_times_match_the_notebooks():
    """The README's reading times: about 130 words of text and 15 lines of code a minute."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d\d) \| \[[^\]]+\]\((notebooks/[^)]+)\) \|[^|]+\| (\d+) min",
                      readme, flags=re.M)
    assert {path for _, path, _ in rows} == {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb")}
    for number, path, minutes in rows:
        cells = json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]
        words = sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
        code = sum(len("".join(c["source"]).splitlines()) for c in cells if c["cell_type"] == "code")
        estimate = words / 130 + code / 15
        assert abs(int(minutes) - estimate) <= max(10, 0.25 * estimate), (
            f"README gives notebook {number} {minutes} min; its text and code suggest "
            f"{5 * round(estimate / 5)} min")


# --- the facts a page states: numbers from one source, section pointers, signatures -------------

factcheck = load(ROOT / "docs" / "factcheck.py", "factcheck")
CONTEXT = factcheck.Context.build()
FACT_PAGES = factcheck.pages() + factcheck.tool_text_pages()


@pytest.mark.parametrize("page", FACT_PAGES, ids=[p.name for p in FACT_PAGES])
def test_page_states_only_facts_with_a_source(page):
    """Every measured number is printed by a cell or read from a results file, every section
    pointer names a real section, every call names real parameters (docs/factcheck.py)."""
    problems = factcheck.page_problems(page, CONTEXT)
    assert not problems, "\n".join(problems)


def test_stubs_take_their_notebooks_and_solutions_parameters():
    problems = factcheck.stub_problems()
    assert not problems, "\n".join(problems)


RESULTS_FILES = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


@pytest.mark.parametrize("path", RESULTS_FILES, ids=[p.name for p in RESULTS_FILES])
def test_results_files_are_written_by_their_scripts(path):
    problems = factcheck.results_file_problems(path)
    assert not problems, "\n".join(problems)


def test_fact_pages_cover_the_pages_exercises_and_tools():
    names = {p.name for p in FACT_PAGES}
    assert {"README.md", "docs/results.md", "notebooks/weights/README.md",
            "exercises/ex07_conv_position_encoding.py", "exercises/check.py"} <= names
    assert {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")} <= names


def _page(path: str, text: str):
    return doccheck.Page(ROOT / path, text)


def _problems(path: str, text: str) -> str:
    return "\n".join(factcheck.page_problems(_page(path, text), CONTEXT))


# A planted copy of each of the errors a reader tripped over, and what the checks say about it.
PLANTED_ERRORS = {
    "nbval link": (
        "notebooks/01_patch_embedding.ipynb",
        "runs each notebook with [nbval](https://github.com/computationalmystic/nbval) in CI.",
        "the project nbval is github.com/computationalmodelling/nbval"),
    "ex03 section pointer": (
        "exercises/ex03_vision_transformer.py",
        'Notebook 03, section 9 ("Attention rollout"). Try it before reading the code.',
        "'Attention rollout' is section 11"),
    "README cls_in_keys": (
        "README.md",
        "| 05 | *5.1 `class_attention`*, 5.2 `class_attention(cls_in_keys=False)` |",
        "has no parameter cls_in_keys"),
    "09 running time, CPU seconds": (
        "notebooks/09_capstone.ipynb",
        "Section 2 trains four models (about 80 CPU seconds in all).",
        "'80 CPU seconds' is not printed by its source"),
    "09 running time, seconds": (
        "notebooks/09_capstone.ipynb",
        "On two idle cores it runs in about 70 s.", "'70 s' is not printed"),
    "09 running time, minutes": (
        "notebooks/09_capstone.ipynb",
        "The whole notebook takes about 9 min.", "'9 min' is not printed"),
    "09 the README's table": (
        "notebooks/09_capstone.ipynb",
        "The results live in `benchmarks/results/digits.json`, the file the README's table comes "
        "from.", "README.md shows benchmarks/results/small_folder.json, not "
                 "benchmarks/results/digits.json"),
    "check.py notebooks 01-08": (
        "exercises/check.py",
        "check: no exercise matches {...} (notebooks 01-08, or IDs like 2.2)",
        "the exercises follow notebooks 01, 02, 03, 04, 05, 06, 07, 08, 10, 11"),
    "10 step for step in float32": (
        "notebooks/10_backprop_by_hand.ipynb",
        "In float32 the two trainers agree step for step for the first 137 steps.",
        "'137 steps' is not printed by its source"),
    "10 about 99% (notebook 09)": (
        "notebooks/10_backprop_by_hand.ipynb",
        "the trainer's full recipe reaches about 99% (notebook 09).", "'99%' is not printed"),
    "ex01 the ordering trap": (
        "exercises/ex01_patch_embedding.py",
        'Notebook 01, section 2 ("The ordering trap") shows a patch embedding.',
        "01_patch_embedding.ipynb's section 2 is"),
}


@pytest.mark.parametrize("name", PLANTED_ERRORS)
def test_checks_find_each_planted_error(name):
    path, text, expected = PLANTED_ERRORS[name]
    problems = _problems(path, text)
    assert expected in problems, f"not found: {expected}\n{problems}"


def test_checks_find_a_stub_whose_signature_is_not_its_notebooks():
    stub = (ROOT / "exercises" / "ex07_conv_position_encoding.py").read_text(encoding="utf-8")
    planted = stub.replace("size, weights: list, biases: list)", "size, params: dict, window: dict)")
    assert planted != stub
    notebook = ROOT / "notebooks" / "07_conv_position_encoding.ipynb"
    problems = "\n".join(factcheck.stub_signature_problems(
        "ex07", planted, factcheck.definitions(stub), factcheck.notebook_definitions(notebook),
        notebook.name))
    assert "conv_rel_pos_enc(q, v, size, params, window): the solution takes (q, v, size, " \
           "weights, biases)" in problems
    assert "writes it as conv_rel_pos_enc(q, v, size, weights, biases)" in problems


def test_checks_find_a_results_file_filled_by_hand(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "benchmarks" / "bench_digits.py").write_text("")
    path = results / "digits.json"
    path.write_text(json.dumps({
        "benchmark": "digits", "written_by": "python benchmarks/bench_digits.py --threads 1",
        "note": "Filled by hand from the README's table: the per-split runs were not kept.",
        "models": {"vit_digits": {"test_accuracy": {"mean": 0.98, "std": 0.01}, "runs": []}}}))
    problems = "\n".join(factcheck.results_file_problems(path, tmp_path))
    assert "says it was filled by hand" in problems
    assert "models.vit_digits.runs is empty" in problems


def test_numbers_match_at_the_precision_shown():
    def quantity(text):
        (q,) = factcheck.quantities(text)
        return q

    printed = factcheck.printed_numbers("test accuracy 0.9283 | 64.4 s | 6.8× | 12.5%")
    assert any(factcheck.matches(quantity("reaches 92.8%."), p) for p in printed)
    assert not any(factcheck.matches(quantity("reaches 92.9%."), p) for p in printed)
    assert any(factcheck.matches(quantity("in about 60 s"), p) for p in printed)  # 64.4 -> 60
    assert not any(factcheck.matches(quantity("in about 70 s"), p) for p in printed)
    assert any(factcheck.matches(quantity("about 1 min"), p) for p in printed)
    assert any(factcheck.matches(quantity("6.8× the box's share"), p) for p in printed)
    assert [q.text for q in factcheck.quantities(
        "a 14 × 14 grid, `98.6%`, $50\\%$, under 60 s, 99.0 ± 0.5% over 98.50-99.00%")] == [
        "99.0%", "0.5%", "98.50%", "99.00%"]


def test_directives_exempt_and_source_only_their_paragraph(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "x.json").write_text(
        json.dumps({"svc": {"test_accuracy": 0.9889}, "cpu_seconds": 47.2}))
    text = ("Split 20% for the test. <!-- not measured: 20% -->\n\n"
            "Again 20% here.\n\n"
            "<!-- source: benchmarks/results/x.json -->\n"
            "The SVC reaches 98.9% in 47 s, and 12.3% of nothing.\n")
    problems = "\n".join(factcheck.number_problems(_page("docs/results.md", text), tmp_path))
    assert "'20%' is not printed" in problems and problems.count("'20%'") == 1
    assert "'12.3%'" in problems and "'98.9%'" not in problems and "'47 s'" not in problems
    stale = _problems("docs/results.md", "Nothing here. <!-- not measured: 5% -->\n")
    assert "names a number the paragraph does not show" in stale


def test_checkpoint_sizes_quoted_in_training_md():
    """training.md: a CoaT safetensors file holds its shared tensors once per name. The sizes,
    in MB of float32 weights, from the specs' key tables (every name) and shared keys (once)."""
    import math

    import vit_scratch
    from vit_scratch.specs import coat

    def megabytes(name):
        cfg = vit_scratch.get_config(name)
        shapes = coat.coat_param_shapes(cfg)
        every = sum(math.prod(s) for s in shapes.values())
        copies = sum(math.prod(shapes[k]) for group in coat.shared_keys(cfg) for k in group[1:])
        return 4 * every / 1e6, 4 * (every - copies) / 1e6

    text = page_text("docs/training.md")
    (lite, lite_once), (full, full_once) = megabytes("coat_lite_tiny"), megabytes("coat_tiny")
    assert (f"CoaT-Lite Tiny's weights take {lite:.1f} MB of its file instead of {lite_once:.1f} "
            f"MB, CoaT Tiny's {full:.1f} MB instead of {full_once:.1f} MB") in text


def test_readme_quotes_the_distilled_run_from_its_metrics():
    """The README's distillation command: the accuracies it quotes are the committed run's."""
    runs = ROOT / "benchmarks/results/runs"
    readme = page_text("README.md")
    for name in ("vit_digits_distilled", "coat_lite_digits"):
        metrics = json.loads((runs / name / "metrics.json").read_text(encoding="utf-8"))
        assert f"{100 * metrics['test_accuracy']:.1f}%" in readme, name
        if name == "vit_digits_distilled":
            assert (f"epoch, {metrics['selected_epoch']} of {metrics['epochs_done']}; "
                    f"{metrics['cpu_seconds']:.0f} s of CPU time") in readme
    settings = json.loads((runs / "vit_digits_distilled/settings.json").read_text(encoding="utf-8"))
    assert settings["settings"]["teacher"] == "runs/coat_lite_digits"
    assert settings["settings"]["model_kwargs"] == {"distilled": True}


# --- what notebooks 01, 02, 03, 07, 08 and the README say about themselves ---------------------

def notebook_cells(number: str) -> list[dict]:
    path = next((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def cell_text(cells: list[dict], kind: str) -> str:
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == kind)


def test_readme_counts_the_papers_it_lists():
    """The opening sentence's count of papers is the number of rows of "The papers", and it
    names each model of the table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## The papers", 1)[1].split("\n\n", 2)[1]
    models = [row.split("|")[1].strip().split(" (")[0] for row in table.splitlines()[2:]]
    count = ["zero", "one", "two", "three", "four", "five", "six"][len(models)]
    opening = " ".join(readme.split("## Start here")[0].split())
    m = re.search(r"(\w+) papers: (.*?), then", opening)
    assert m and m.group(1).lower() == count, f"the README lists {len(models)} papers: {models}"
    assert [name.strip("*") for name in re.findall(r"\*\*\w[\w ]*\*\*", m.group(2))] == models


def test_notebook_01_keeps_c_for_the_image_channels():
    """C is the image's channels (3) and E the embedding width: a token's shape ends in E."""
    cells = notebook_cells("01")
    text = cell_text(cells, "markdown") + "\n" + cell_text(cells, "code")
    assert "P, C, E = 16, 3, 192" in text
    wrong = re.findall(r"\((?:[^()]*\bN\b[^()]*|1, 1), C\)|emb\}?_\{?C/2|\bC channels\b|C-channel",
                       text)
    assert not wrong, f"token shapes with C for the embedding width: {wrong}"


def test_notebook_02_does_not_count_the_doublings_above_the_prediction():
    """The cost table is measured on each run, and its explicit column can exceed the MACs'
    ×4.0 at several doublings in a row: the prose says from where on, not how many times."""
    cells = notebook_cells("02")
    prose = cell_text(cells, "markdown")
    bullet = prose.split("* **above** it", 1)[1].split("\n\n")[0]
    assert not re.search(r"\b(once|twice|one doubling)\b", bullet), bullet
    assert "from there on" in bullet


def test_notebook_03_comments_the_number_of_canvases_it_draws():
    code = cell_text(notebook_cells("03"), "code")
    drawn = {int(n) for n in re.findall(r"world\.images\[:(\d+)\]", code)}
    shown = {int(n) for n in re.findall(r"#[^\n]*\((\d+), 37, 37\)", code)}
    assert len(drawn) == 1 and shown and shown <= drawn, (drawn, shown)


def test_notebook_07_counts_the_pictures_its_model_learns_from():
    """Section 11's fine-tuning learns from the training split less its validation tenth."""
    from vit_scratch.data import make_datasets

    train, val, _ = make_datasets("digits_on_canvas", "vit_digits", val_fraction=0.1)
    prose = " ".join(cell_text(notebook_cells("07"), "markdown").split())
    quoted = re.findall(r"learn that from ([\d,]+) pictures", prose)
    assert quoted == [f"{len(train):,}"], (quoted, len(train), len(val))


def test_notebook_08_does_not_call_an_average_pool_sharp():
    prose = " ".join(cell_text(notebook_cells("08"), "markdown").split())
    for sentence in re.split(r"(?<=[.:;])\s", prose):
        assert not ("average pool" in sentence and "sharp" in sentence), sentence


def test_cait_class_attention_layers_count_from_zero():
    """CaiT's two class-attention layers are layer 0 and layer 1, as notebook 05 counts them, in
    the localisation experiment's views (its results file) and on the results page."""
    import ast

    data = json.loads((ROOT / "benchmarks" / "results" / "attention_localisation.json")
                      .read_text(encoding="utf-8"))
    assert list(data["summary"]["cait"]["views"]) == ["class attention, layer 0",
                                                      "class attention, layer 1"]
    script = (ROOT / "benchmarks" / "exp_attention_localisation.py").read_text(encoding="utf-8")
    names = [node for node in ast.walk(ast.parse(script)) if isinstance(node, ast.JoinedStr)
             and "class attention, layer" in ast.unparse(node)]
    assert names and all("i + 1" not in ast.unparse(node) for node in names)
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert "class attention, layer 0" in page and "class attention, layer 2" not in page
