"""Test helper: tiny Lightning and Hugging Face Trainer fits, each recorded by gapscope's
trainer callbacks into a run directory under `out`."""
from __future__ import annotations

import os
from pathlib import Path

import user_loops

BATCH = user_loops.BATCH


def lightning_fit(out: Path, *, steps: int = 16, trace_steps=(6, 9), warmup: int = 3,
                  accumulate: int = 1, precision="32-true", two_optimizers: bool = False,
                  name: str = "lit-mlp"):
    """A LightningModule of the MLP user_loops trains, fit on CPU; returns the callback."""
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
