"""Issue 44 items 1 and 7: a user's own torch model through `gapscope.capture(model=...)` gets the
seed workloads' layers (one real run of a three-level model with LayerNorm, GELU, attention, an
LSTM and a module called twice, AdamW), its FLOPs counted by torch's FlopCounterMode."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import user_loops
from trainer_fits import flop_counter_reference, layers_add_up
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.layers import layer_breakdown
from gapscope.cli import cli
from gapscope.model_layers import select_layers

NAMES = ["embed", "mix", "block.0", "block.1", "rnn", "head"]
TOKENS = user_loops.OWN_BATCH * user_loops.OWN_SEQ  # 128 rows through every Linear
WIDTH, VOCAB = user_loops.OWN_WIDTH, user_loops.OWN_VOCAB


@pytest.fixture(scope="module")
def own_capture(tmp_path_factory):
    return user_loops.own_model_loop(tmp_path_factory.mktemp("own_layers"))


@pytest.fixture(scope="module")
def own_run(own_capture):
    return own_capture[0].run_dir


@pytest.fixture(scope="module")
def own_layers(own_run):
    return layer_breakdown(load_run(own_run))


def reference_flops() -> dict[str, dict[str, int]]:
    """FlopCounterMode run on its own over the model's forward and backward of one batch, as a
    user would: {module path: {"forward", "backward"}}."""
    model = user_loops.own_model()
    tokens, targets = user_loops.own_batches(1)[0]
    return flop_counter_reference(model, lambda: user_loops.own_loss(model, tokens, targets))


def test_layers_are_the_models_modules_with_forward_and_backward_time(own_run, own_layers):
    assert [r.name for r in own_layers.rows] == NAMES
    for row in own_layers.rows:
        assert row.forward_ms > 0 and row.backward_ms > 0, row
    # Layers plus `outside layers` are the traced phase, which the trace breakdown reports.
    layers_add_up(own_run)


def test_flops_are_flop_counter_modes_and_the_lstm_rule(own_run, own_layers):
    reference = reference_flops()
    for name in ("mix", "block.0", "block.1", "head"):
        row = own_layers.row(name)
        for phase in ("forward", "backward"):
            expected = reference[f"Net.{name}"][phase]
            assert row.gflop(phase) * 1e9 == pytest.approx(expected, rel=0.01), (name, phase)
    # By hand (the manifest keeps the counts whole; the table's GFLOP have 6 decimals): a
    # Linear is 2·rows·in·out forward, backward twice that (input and weight gradients); mix
    # runs twice a step, both calls counted once each.
    counted = {layer["name"]: layer["dims"] for layer in
               json.loads((own_run / "manifest.json").read_text())["layers"]}
    assert counted["head"]["forward_flop"] == 2 * TOKENS * WIDTH * VOCAB == 409_600
    assert counted["mix"]["forward_flop"] == 2 * (2 * TOKENS * WIDTH * WIDTH) == 524_288
    assert counted["mix"]["backward_flop"] == 1_048_576
    # A block: fc, attention's in-projection (3 GEMMs) and out-projection, 262,144 each; the
    # counter leaves QKᵀ and AV (2·16·2·8·8·16 = 65,536 each) out on this CPU.
    assert counted["block.0"]["forward_flop"] == 5 * 262_144 == 1_310_720
    # The counter counts 0 for nn.LSTM and for the embedding's lookup: the LSTM gets the hand
    # rule, 2·4u(in+u) + 13u per cell: 128 cells · (16,384 + 416) = 2,150,400.
    assert "Net.rnn" not in reference  # no FLOP under it at all
    assert counted["rnn"]["forward_flop"] == 128 * (2 * 4 * 32 * 64 + 13 * 32) == 2_150_400
    assert own_layers.row("rnn").forward_gflop == pytest.approx(0.00215, abs=1e-6)
    assert counted["embed"]["forward_flop"] == own_layers.row("embed").forward_gflop == 0
    head = own_layers.row("head")
    assert head.gflops("forward") == pytest.approx(head.forward_gflop / (head.forward_ms / 1000))


def test_a_reused_module_is_said_and_counted_once(own_layers):
    assert any(n.startswith("mix ran 2 times in the counted step") for n in own_layers.notes)
    # Both calls are in one row, its time each instant once: mix's forward spans lie in no
    # other layer's, so the rows add up to no more than the phase (checked above) and mix has
    # its two calls' FLOPs (checked above), not four.


def test_hooks_are_gone_after_the_capture_and_the_manifest_keeps_the_counts(own_run):
    manifest = json.loads((own_run / "manifest.json").read_text())
    assert [layer["name"] for layer in manifest["layers"]] == NAMES
    assert manifest["layer_depth"] == 1
    head = manifest["layers"][-1]
    assert head["kind"] == "module" and head["dims"]["module"] == "Linear"
    assert head["dims"]["params"] == WIDTH * VOCAB + VOCAB and head["dims"]["tensors"] == 2


def test_no_hook_outside_the_window(own_capture, tmp_path):
    """Hooks go on at the window's first step and off after its last, and a loop that fails
    inside the window takes them off too: the model trains on with none, and no FLOP counter
    is left running."""
    import torch
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in own_capture[1].modules())
    with pytest.raises(ValueError, match="broke"):
        user_loops.own_model_loop(tmp_path, steps=5, trace_steps=(2, 5), fail_at=3)
    failed = next(tmp_path.glob("own-model-*"))
    manifest = json.loads((failed / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"  # it recorded steps before it broke
    assert manifest["layers"][1]["dims"]["forward_flop"] == 524_288  # counted on step 1
    assert not torch.utils._python_dispatch._get_current_dispatch_mode_stack()


def test_every_view_shows_the_layers(own_run, own_layers, tmp_path):
    from gapscope.analysis.report import write_report
    from gapscope.analysis.results.panels.layer_panel import layer_panel
    runner = CliRunner()
    table = runner.invoke(cli, ["breakdown", "--layers", str(own_run)])
    assert table.exit_code == 0, table.output
    assert "block.0" in table.output and "outside layers" in table.output
    document = json.loads(runner.invoke(cli, ["breakdown", "--layers", "--format", "json",
                                              str(own_run)]).output)
    rows = {r["name"]: r for r in document["layers"]["layers"]}
    assert list(rows) == NAMES and rows["head"]["forward_gflop"] == 0.00041
    assert [r["name"] for r in layer_panel(own_layers)["rows"]] == NAMES  # the tab's panel
    files = write_report([own_run], tmp_path / "report.md")
    assert "block.1" in files.markdown.read_text()


def test_depth_and_bad_models():
    import torch
    model = user_loops.own_model()
    assert list(select_layers(model)) == NAMES
    assert list(select_layers(model, 2))[:8] == ["embed", "mix", "block.0", "block.0.fc", "block.0.act",
                                                 "block.0.norm", "block.0.attn", "block.1"]
    # A LightningModule's `self.model`, holding all the parameters, is looked through.
    wrapper = torch.nn.Module()
    wrapper.model = model
    assert list(select_layers(wrapper)) == [f"model.{n}" for n in NAMES]
    import gapscope
    with pytest.raises(ValueError, match="eager model"):
        gapscope.capture("x", model=torch.compile(model))
    with pytest.raises(ValueError, match="layer_depth must be 1 or more"):
        gapscope.capture("x", model=model, layer_depth=0)


def test_flops_are_found_through_a_wrapper_that_ran_the_model():
    """DDP (and Lightning's wrapper in it) run the model from outside: FlopCounterMode then keys
    its modules `Wrap.module.net.0`, not by the model's own path. By hand, batch 64: 100 -> 64
    is 2·64·100·64 = 819,200 forward, as many backward (weights only, no input gradient); 64 ->
    10 is 81,920 forward and 163,840 backward."""
    import torch

    from gapscope.model_layers import ModelLayers
    from gapscope.profilers.trace_window import TraceWindow
    net = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = torch.nn.Module()
            self.module.net = net

        def forward(self, x):
            return self.module.net(x)

    lightning_like = torch.nn.Module()
    lightning_like.net = net
    layers = ModelLayers(lightning_like, 1, TraceWindow(1, 1))
    layers.begin_step(0)
    layers.phase("forward")
    loss = Wrap()(torch.randn(64, 100)).sum()
    layers.phase("backward")
    loss.backward()
    layers.end_step(0)
    counted = {layer["name"]: layer["dims"] for layer in layers.manifest_fields()["layers"]}
    assert [(counted[n]["forward_flop"], counted[n]["backward_flop"]) for n in ("net.0", "net.2")] == [
        (819_200, 819_200), (81_920, 163_840)]
