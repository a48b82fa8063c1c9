"""benchmarks/exp_cait.py: each residual form starts from its own paper's initialisation, the
class token's two routes start equally open, the learning rate is chosen as declared, and the
contrasts are the intervals of the paired runs.  (The experiment's numbers are re-run by
tests/test_canaries.py; the pages' tables by tests/test_docs_consistency.py.)"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import exp_cait  # noqa: E402
import stats  # noqa: E402
import tables  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "cait.json"


def linears(model):
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


@pytest.fixture(scope="module")
def models():
    out = {}
    for init in exp_cait.INITS:
        torch.manual_seed(0)
        out[init] = exp_cait.deep_narrow()("rezero", 2, init=init)
    return out


def test_timm_init_leaves_the_patch_embedding_at_pytorch_default(models):
    layers = linears(models["timm"])
    embed = layers.pop("embed")
    bound = 1 / math.sqrt(4)  # U(±1/√fan_in), weight and bias
    assert embed.weight.abs().max() <= bound and embed.weight.abs().max() > 0.3
    assert embed.bias.abs().max() <= bound and embed.bias.abs().max() > 0
    for name, m in layers.items():  # N(0, 0.02²) truncated at ±2 std, zero biases
        assert m.weight.abs().max() <= 0.04, name
        assert 0.012 < m.weight.std() < 0.02, name
        assert not m.bias.any(), name
    assert models["timm"].cls_token.abs().max() < 1e-5
    assert models["timm"].pos_embed.abs().max() <= 0.04


def test_small_tokens_init_differs_from_timm_in_the_embedding_only(models):
    small, timm = linears(models["small_tokens"]), linears(models["timm"])
    assert small["embed"].weight.abs().max() <= 0.04 and not small["embed"].bias.any()
    for name in small:
        if name != "embed":
            torch.testing.assert_close(small[name].weight, timm[name].weight, rtol=0, atol=0)
    tokens = {k: m.tokens(torch.rand(8, 1, 8, 8)) for k, m in models.items()}
    assert tokens["small_tokens"].pow(2).mean().sqrt() < 0.1 * tokens["timm"].pow(2).mean().sqrt()


def test_xavier_init_is_xavier_uniform_on_every_linear(models):
    for name, m in linears(models["xavier"]).items():
        fan_out, fan_in = m.weight.shape
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert m.weight.abs().max() <= bound, name
        assert m.weight.abs().max() > 0.7 * bound, name  # uniform: its largest near the bound
        assert not m.bias.any(), name


def test_rezero_alpha_gets_a_steady_gradient_only_from_xavier():
    """ReZero's mechanism: dL/dα = <dL/dx, f(x)> is as large as the branch's output; with
    N(0, 0.02²) Linears and no norm it is tiny and its sign changes from batch to batch."""
    torch.manual_seed(0)
    x, y = torch.rand(4, 64, 1, 8, 8), torch.randint(0, 10, (4, 64))
    grads = {}
    for init in ("small_tokens", "xavier"):
        torch.manual_seed(0)
        model = exp_cait.deep_narrow()("rezero", 3, init=init)
        grads[init] = []
        for xb, yb in zip(x, y):
            model.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            grads[init].append(model.blocks[0].ls1.alpha.grad.item())
    assert max(abs(g) for g in grads["small_tokens"]) < 1e-3
    assert min(abs(g) for g in grads["xavier"]) > 1e-2
    assert len({math.copysign(1, g) for g in grads["xavier"]}) == 1


def test_bad_init_and_placement_are_named():
    with pytest.raises(ValueError, match="init must be one of .* got 'xavir'"):
        exp_cait.deep_narrow()("rezero", 2, init="xavir")
    with pytest.raises(ValueError, match="placement must be one of .* got 'early'"):
        exp_cait.class_token_model("early")
    with pytest.raises(ValueError, match="talking_heads must be one of .* got 'eye'"):
        exp_cait.class_token_model("late", "eye")


def test_talking_heads_at_the_identity_are_plain_attention():
    """Both routes start equally open: at the identity, each talking-heads layer computes
    multi-head attention with the same qkv and proj."""
    from vit_scratch.torch_nn.attention import Attention

    torch.manual_seed(0)
    model = exp_cait.class_token_model("from_start", "identity").eval()
    for block in model.blocks:
        for mix in (block.attn.proj_l, block.attn.proj_w):
            assert torch.equal(mix.weight, torch.eye(mix.weight.shape[0])) and not mix.bias.any()
    talking = model.blocks[0].attn
    plain = Attention(talking.qkv.in_features, talking.num_heads, qkv_bias=True).eval()
    plain.load_state_dict({k: v for k, v in talking.state_dict().items()
                           if not k.startswith(("proj_l", "proj_w"))})
    x = torch.randn(2, 17, talking.qkv.in_features)
    with torch.no_grad():
        torch.testing.assert_close(talking(x), plain(x), rtol=1e-5, atol=1e-6)


def test_timm_talking_heads_shrink_the_attention_output():
    """The positive control's mechanism: timm's N(0, 0.02²) head maps make every attention
    output more than ten times smaller than at the identity."""
    x = torch.randn(2, 17, 64)
    out = {}
    for heads in exp_cait.TALKING_HEADS:
        torch.manual_seed(0)
        attn = exp_cait.class_token_model("from_start", heads).blocks[0].attn.eval()
        with torch.no_grad():
            out[heads] = attn(x).pow(2).mean().sqrt().item()
    assert out["timm"] < 0.1 * out["identity"]


def test_from_start_runs_the_class_token_through_the_self_attention_blocks():
    """From the start the patches see the class token in every block; late, never."""
    torch.manual_seed(0)
    late = exp_cait.class_token_model("late").eval()
    torch.manual_seed(0)
    start = exp_cait.class_token_model("from_start").eval()
    assert len(start.blocks) == len(late.blocks) + len(late.blocks_token_only)
    assert len(start.blocks_token_only) == 0
    images = torch.rand(2, 1, 16, 16)
    changed = {}
    with torch.no_grad():
        for name, model in (("late", late), ("start", start)):
            tokens = model.forward_features(images)  # (B, 1 + N, C)
            assert tokens.shape == (2, 1 + 16, 64) and model(images).shape == (2, 10)
            model.cls_token.copy_(torch.randn(model.cls_token.shape,
                                              generator=torch.Generator().manual_seed(1)))
            changed[name] = (model.forward_features(images) - tokens)[:, 1:].abs().max().item()
    assert changed["late"] == 0 and changed["start"] > 1e-5
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in (("late", late),
                                                                     ("start", start))}
    assert abs(params["late"] - params["start"]) < 0.01 * params["late"]


def test_choose_lr_takes_the_best_mean_validation_accuracy_and_the_smaller_on_a_tie():
    runs = [dict(form="a", seed=0, lr=lr, val_accuracy=v)  # exact binary fractions: a true tie
            for lr, v in ((1e-3, 0.5), (1e-3, 0.75), (3e-3, 0.25), (3e-3, 1.0), (1e-2, 0.125))]
    runs.append(dict(form="b", seed=0, lr=1e-2, val_accuracy=1.0))  # another form: not counted
    lr, means = exp_cait.choose_lr(runs, grid=(3e-3, 1e-3, 1e-2), form="a")  # the larger first
    assert lr == 1e-3 and means == {"0.003": 0.625, "0.001": 0.625, "0.01": 0.125}
    runs.append(dict(form="a", seed=0, lr=3e-3, val_accuracy=1.0))
    assert exp_cait.choose_lr(runs, grid=(1e-3, 3e-3, 1e-2), form="a")[0] == 3e-3
    with pytest.raises(ValueError, match="no run with lr=0.1"):
        exp_cait.choose_lr(runs, grid=(0.1,), form="a")


def hand_made_depth_runs():
    """Seeds 0-2 of the forms each depth runs (depths 3 and 12, the chosen rates), and the
    control."""
    acc = {"prenorm": (0.90, 0.50), "rezero": (0.80, 0.85), "prenorm_scalar": (0.91, 0.92),
           "layerscale": (0.92, 0.95)}
    lrs = {f: {"3": 1e-3, "12": 1e-3} for f in exp_cait.FORMS}
    runs = []
    for seed, wobble in enumerate((0.0, 0.01, -0.02)):
        for form, (shallow, deep) in acc.items():
            for depth, a in ((3, shallow), (12, deep)):
                if form not in exp_cait.forms_at(depth):
                    continue
                runs.append(dict(form=form, init=exp_cait.INIT_OF_FORM[form], depth=depth,
                                 seed=seed, lr=1e-3, test_accuracy=a + wobble * (depth == 12),
                                 val_accuracy=a, final_train_loss=1.0, selected_epoch=20))
        for form, a in (("layerscale", 0.9), ("prenorm", 0.3 + wobble)):
            runs.append(dict(form=form, init="small_tokens", depth=12, seed=seed, lr=1e-3,
                             test_accuracy=a, val_accuracy=a, final_train_loss=1.0,
                             selected_epoch=20))
    return runs, lrs


def test_depth_contrasts_are_the_paired_intervals_of_the_runs(monkeypatch):
    monkeypatch.setitem(exp_cait.DEPTH_PRIMARY, "depth", 12)
    monkeypatch.setitem(exp_cait.DEPTH_CONTROL, "depth", 12)
    monkeypatch.setattr(exp_cait, "FORMS_AT_DEPTH", {12: ("prenorm", "rezero", "layerscale")})
    runs, lrs = hand_made_depth_runs()
    out = exp_cait.analyse_depth(runs, lrs, [3, 12])
    # primary: LayerScale − pre-norm at 12: 0.45 on every seed (the wobble is shared)
    primary = out["primary"]["interval"]
    assert primary["mean"] == pytest.approx(0.45) and primary["sd"] == pytest.approx(0, abs=1e-12)
    # the forms a depth does not run make no contrast
    assert set(out["secondary_holm"]) == {
        "layerscale − prenorm @ 3", "layerscale − rezero @ 3",
        "layerscale − prenorm_scalar @ 3", "layerscale − rezero @ 12"}
    expect = stats.paired([0.95, 0.96, 0.93], [0.85, 0.86, 0.83])
    assert out["secondary_holm"]["layerscale − rezero @ 12"]["interval"]["mean"] == \
        pytest.approx(expect.mean)
    above = out["rezero_above_chance"]
    assert set(above) == {"3", "12"}
    assert above["3"]["interval"]["mean"] == pytest.approx(0.7)
    assert above["12"]["interval"]["mean"] == pytest.approx(0.75 - 0.01 / 3)
    control = out["positive_control"]["interval"]
    assert control["mean"] == pytest.approx(0.6 - (0.0 + 0.01 - 0.02) / 3)
    assert all(isinstance(c["holm_rejected"], bool) for c in out["secondary_holm"].values())


def test_a_depth_without_a_grid_runs_every_seed_at_the_rate_chosen_at_its_source(monkeypatch):
    """The grid runs on the first seed at the tuned depths only; the borrowed depth runs every
    seed at the source depth's chosen rate, which is the best on the first seed."""
    pair = ("prenorm", "layerscale")
    monkeypatch.setattr(exp_cait, "FORMS_AT_DEPTH", {3: pair, 12: pair})
    monkeypatch.setattr(exp_cait, "RATE_FROM_DEPTH", {12: 3})
    monkeypatch.setitem(exp_cait.DEPTH_PRIMARY, "depth", 12)
    monkeypatch.setitem(exp_cait.DEPTH_CONTROL, "depth", 12)
    monkeypatch.setattr(exp_cait, "digits_splits", lambda seed: None)
    calls = []

    def run_depth(form, depth, seed, lr, splits=None, init=None, log=print, **recipe):
        calls.append((form, depth, seed, lr, init))
        good = lr == exp_cait.DEPTH_LR_GRID[-1]
        return dict(form=form, depth=depth, seed=seed, lr=lr, init=init or "timm",
                    val_accuracy=0.9 if good else 0.5, test_accuracy=0.8 + seed / 100,
                    final_train_loss=1.0, selected_epoch=1)

    monkeypatch.setattr(exp_cait, "run_depth", run_depth)
    out = exp_cait.depth_experiment([3, 12], [0, 1, 2], log=lambda *a, **k: None)
    best = exp_cait.DEPTH_LR_GRID[-1]
    assert out["lr"]["prenorm"] == {"3": best, "12": best} and "12" not in out["lr_search"]["prenorm"]
    main = [c[1:4] for c in calls if c[0] == "prenorm" and c[4] is None]
    assert sorted(c for c in main if c[0] == 3) == sorted(
        [(3, 0, lr) for lr in exp_cait.DEPTH_LR_GRID] + [(3, 1, best), (3, 2, best)])
    assert sorted(c for c in main if c[0] == 12) == [(12, s, best) for s in (0, 1, 2)]
    with pytest.raises(ValueError, match="depth 12 takes its rates from depth 3"):
        exp_cait.depth_experiment([12], [0, 1, 2], log=lambda *a, **k: None)


def test_run_log_resumes_a_stopped_command(tmp_path):
    """A run already in the --runs file is read back, not trained again; a new one is appended."""
    calls = []

    def train(form, seed, lr):
        calls.append((form, seed, lr))
        return {"form": form, "seed": seed, "lr": lr, "test_accuracy": 0.5 + seed / 10}

    path = tmp_path / "runs.jsonl"
    first = exp_cait.RunLog(path)
    assert first(train, dict(form="a", seed=1, lr=1e-3))["test_accuracy"] == 0.6
    again = exp_cait.RunLog(path)
    assert again(train, dict(form="a", seed=1, lr=1e-3)) == {
        "form": "a", "seed": 1, "lr": 1e-3, "test_accuracy": 0.6}
    assert calls == [("a", 1, 1e-3)]
    again(train, dict(form="a", seed=2, lr=1e-3))
    assert calls[-1] == ("a", 2, 1e-3) and len(path.read_text().splitlines()) == 2


def test_tables_show_the_results_file():
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    depth = tables.cait_table(data, "depth")
    for form, by_depth in data["depth"]["lr"].items():
        for n, lr in by_depth.items():
            assert f"lr {lr:g}" in depth
    deepest = str(max(data["settings"]["depth"]["depths"]))
    summary = data["depth"]["summary"]["layerscale"][deepest]["test_accuracy"]
    assert f"{100 * summary['mean']:.1f} ± {100 * summary['std']:.1f} %" in depth
    missing = sum(len(data["settings"]["depth"]["forms"]) - len(forms)
                  for forms in data["settings"]["depth"]["forms_at_depth"].values())
    assert depth.count("| -- ") == missing  # a form a depth does not run
    contrasts = tables.cait_table(data, "contrasts")
    assert contrasts.count("**primary**") == 2
    with pytest.raises(ValueError, match="part must be"):
        tables.cait_table(data, "both")


def test_results_file_summaries_are_its_runs():
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    d = data["depth"]
    for form, by_depth in d["summary"].items():
        for depth, entry in by_depth.items():
            runs = [r["test_accuracy"] for r in d["runs"] if r["form"] == form
                    and r["depth"] == int(depth) and r["lr"] == d["lr"][form][depth]
                    and r["init"] == exp_cait.INIT_OF_FORM[form]]
            assert len(runs) == len(data["settings"]["depth"]["seeds"]) >= 3
            assert entry["test_accuracy"]["mean"] == pytest.approx(sum(runs) / len(runs))
    borrowed = data["settings"]["depth"]["rate_from_depth"]
    for form, by_depth in d["lr"].items():  # the chosen rate: the search's best on the first seed
        for depth, lr in by_depth.items():
            if depth in borrowed:  # no grid of its own: the rate chosen at the depth named
                assert depth not in d["lr_search"][form]
                assert lr == by_depth[str(borrowed[depth])]
                continue
            search = d["lr_search"][form][depth]
            assert max(search.values()) == search[f"{lr:g}"]
    c = data["class_token"]
    assert c["primary"]["interval"]["n"] == len(data["settings"]["class_token"]["seeds"]) >= 3
    late = stats.by_seed(c["runs"], "test_accuracy", placement="late", talking_heads="identity",
                         lr=c["lr"]["late"])
    start = stats.by_seed(c["runs"], "test_accuracy", placement="from_start",
                          talking_heads="identity", lr=c["lr"]["from_start"])
    assert c["primary"]["interval"]["mean"] == pytest.approx(stats.paired(late, start).mean)


def test_too_few_seeds_are_refused(capsys):
    with pytest.raises(SystemExit):
        exp_cait.main(["--seeds", "0", "--part", "depth"])
    assert "--seeds needs at least 2 different seeds" in capsys.readouterr().err
