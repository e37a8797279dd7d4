"""Test helper: tiny Lightning and Hugging Face Trainer fits, each recorded by gapscope's
trainer callbacks into a run directory under `out`."""
from __future__ import annotations

import csv
import gzip
import json
import os
from collections import Counter
from pathlib import Path

import user_loops

BATCH = user_loops.BATCH


def lightning_fit(out: Path, *, steps: int = 16, trace_steps=(6, 9), warmup: int = 3,
                  accumulate: int = 1, precision="32-true", two_optimizers: bool = False,
                  name: str = "lit-mlp", compile_backend: str | None = None):
    """A LightningModule of the MLP user_loops trains, fit on CPU; returns the callback.
    `compile_backend`: the module torch.compile'd with it first, as Lightning's docs do."""
    import torch
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    from gapscope.trainers.lightning import GapscopeCallback

    torch.manual_seed(0)
    # One intra-op thread: on 2 shared cores torch's spinning pool made this MLP's step 90x slower.
    torch.set_num_threads(1)
    x, y = user_loops.data()
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=BATCH,
                        shuffle=True)
    module = lightning_module("TwoOptimizers" if two_optimizers else "Mlp")
    if compile_backend is not None:
        module = torch.compile(module, backend=compile_backend)
    callback = GapscopeCallback(name, trace_steps=trace_steps, out=out, warmup_steps=warmup)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accumulate_grad_batches=accumulate,
                         precision=precision, callbacks=[callback])
    trainer.fit(module, loader)
    return callback


def _mlp():
    import torch
    return torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def lightning_module(name: str):
    """A fresh instance of one of the LightningModules below."""
    return _modules()[name]()


def _modules():
    import torch
    import lightning.pytorch as pl

    class Mlp(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            return torch.nn.functional.cross_entropy(self.net(inputs), targets)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class TwoOptimizers(pl.LightningModule):
        """Manual optimization, two optimizers (a GAN's shape): each updates its half."""

        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.first, self.second = _mlp(), torch.nn.Linear(10, 10)

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            opt_first, opt_second = self.optimizers()
            loss = torch.nn.functional.cross_entropy(self.first(inputs), targets)
            opt_first.zero_grad()
            self.manual_backward(loss)
            opt_first.step()
            loss2 = torch.nn.functional.cross_entropy(self.second(self.first(inputs).detach()), targets)
            opt_second.zero_grad()
            self.manual_backward(loss2)
            opt_second.step()
            return loss

        def configure_optimizers(self):
            return (torch.optim.SGD(self.first.parameters(), lr=0.1),
                    torch.optim.SGD(self.second.parameters(), lr=0.1))

    return {"Mlp": Mlp, "TwoOptimizers": TwoOptimizers}


HF_BATCH, HF_TOKENS = 8, 16


def hf_model():
    """A 2-layer GPT-2 of hidden size 32 built from its config: nothing downloaded."""
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32))


def hf_fit(out: Path, *, steps: int = 16, trace_steps=(6, 9), warmup: int = 3, accumulate: int = 1,
           name: str = "hf-gpt2", eval_every: int | None = None, fail_at: int | None = None,
           layer_depth: int | None = 1, compile_backend: str | None = None,
           sigterm_at: int | None = None):
    """A 2-layer GPT-2 of hidden size 32 built from its config (nothing downloaded), trained by
    the Hugging Face Trainer on random tokens on the CPU; returns the gapscope callback.
    `compile_backend`: torch_compile=True with that backend. `fail_at` / `sigterm_at`: update
    that raises / that sends the process SIGTERM, at its end (before gapscope sees it end)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import Trainer, TrainingArguments

    from gapscope.trainers.hf import capture_trainer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = hf_model()
    tokens = torch.randint(0, model.config.vocab_size, (256, HF_TOKENS))
    dataset = [{"input_ids": row, "labels": row} for row in tokens]
    args = TrainingArguments(
        output_dir=str(out / "hf-output"), max_steps=steps, per_device_train_batch_size=HF_BATCH,
        gradient_accumulation_steps=accumulate, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0,
        eval_strategy="steps" if eval_every else "no", eval_steps=eval_every,
        per_device_eval_batch_size=8,
        **({"torch_compile": True, "torch_compile_backend": compile_backend} if compile_backend else {}))
    trainer = Trainer(model=model, args=args, train_dataset=dataset,
                      eval_dataset=dataset[:16] if eval_every else None,
                      callbacks=([] if fail_at is None else [_FailAt(fail_at)])
                      + ([] if sigterm_at is None else [_FailAt(sigterm_at, signal=True)]))
    with capture_trainer(trainer, name, trace_steps=trace_steps, out=out, warmup_steps=warmup,
                         layer_depth=layer_depth) as cap:
        trainer.train()
    return cap


def _fail_at_class():
    from transformers import TrainerCallback

    class FailAt(TrainerCallback):
        """Raises at the end of update `step` (1-based, as global_step counts), before gapscope's
        callback, added after it, sees that update end."""

        def __init__(self, step, signal=False):
            self.step, self.signal = step, signal

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == self.step:
                if self.signal:
                    import signal
                    os.kill(os.getpid(), signal.SIGTERM)
                raise ValueError("the trainer broke")

    return FailAt


def _FailAt(step, signal=False):  # noqa: N802 - a class, defined on first use
    return _fail_at_class()(step, signal)


# What both trainers' tests check a fit's run directory with.
MARKED = ("data_load", "forward", "backward", "optimizer")
STEPS, TRACE, WARMUP = 16, (6, 9), 3


def manifest_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def steps_of(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def phase_ranges(run_dir: Path) -> Counter:
    """How many of each gapscope phase range the torch trace holds."""
    (trace,) = run_dir.glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return Counter(e["name"] for e in events if e.get("name", "").startswith("gapscope/"))


def flop_counter_reference(model, run_one) -> dict[str, dict[str, int]]:
    """torch's FlopCounterMode run on its own over `run_one()` (one batch's forward, returning the
    loss) and its backward: {module path: {"forward", "backward"}}."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        loss = run_one()
        forward = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
        loss.backward()
        total = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    return {k: {"forward": forward.get(k, 0), "backward": total[k] - forward.get(k, 0)} for k in total}


def layers_add_up(run_dir: Path):
    """The run's layers, each with forward and backward time, checked to add up with `outside
    layers` to the traced phases of the trace breakdown within 5 %."""
    import pytest

    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.results.layers import layer_breakdown
    run = load_run(run_dir)
    layers, traced = layer_breakdown(run), breakdown(run, "trace")
    for phase in ("forward", "backward"):
        inside = sum(r.ms(phase) for r in layers.rows)
        assert inside + layers.outside_ms(phase) == pytest.approx(traced.phases[phase].ms, rel=0.05)
        assert layers.outside_ms(phase) >= 0
    return layers
