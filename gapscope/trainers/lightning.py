"""`gapscope.trainers.lightning.GapscopeCallback`: a Lightning fit recorded as a gapscope run
directory, its phases taken from Lightning's hooks."""
from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback

from gapscope.trainers.hook_steps import HookSteps


class GapscopeCallback(Callback):
    """Times every training step and traces `trace_steps` (as in `range(first, stop)`; None:
    timers only) into `out/<name>-torch-user-<time>/`:

        trainer = lightning.pytorch.Trainer(..., callbacks=[GapscopeCallback("my-run")])

    Phases, from the hooks (Lightning 2.x):
    - data_load: the loop's fetch of the batch (Lightning's own `train_dataloader_next`) up to
      `on_train_batch_start`, so the transfer to the device is in it;
    - forward: `on_train_batch_start` to `on_before_zero_grad` / `on_before_backward`;
    - backward: `on_before_backward` to `on_after_backward`;
    - optimizer: `on_before_zero_grad` to `on_before_backward`, and `on_before_optimizer_step`
      (gradient clipping included) until the optimizer's step returns (torch's step post hook);
    - other: the rest of the step, e.g. the loop's work after the optimizer step.

    A step is one optimizer update, as in gapscope's own runs: with gradient accumulation it
    holds every micro-batch up to the update; with several optimizers (manual optimization) it
    is one `training_step`, whose time outside backward and optimizer steps counts as forward.
    Validation and checkpoints between steps are outside the steps. Mixed precision changes
    nothing here. Under DDP each rank writes `rank<r>/` of one job directory, as under torchrun.

    Layers: the LightningModule's, as the capture API's `model=` gives them (`layer_depth`: 1,
    the children that hold parameters; None: no layer ranges); none for a compiled module."""

    def __init__(self, name: str = "lightning", trace_steps: tuple[int, int] | None = (10, 15),
                 out: str | Path = "traces", *, warmup_steps: int | None = None,
                 layer_depth: int | None = 1):
        super().__init__()
        self._steps = HookSteps(name, "gapscope.trainers.lightning", trace_steps, out, warmup_steps,
                                layer_depth=layer_depth)
        self._stepped = False
        self._manual = False
        self._loss = None  # the step's micro-batch losses, summed
        self._unhook: list = []

    @property
    def run_dir(self) -> Path | None:
        return self._steps.run_dir

    @property
    def job_dir(self) -> Path | None:
        return self._steps.job_dir

    # -- the fit ------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module):
        if self._steps.started:
            raise RuntimeError("gapscope: a GapscopeCallback records one fit; give each fit its own")
        self._manual = not pl_module.automatic_optimization
        self._steps.settings.update({
            "precision": str(trainer.precision),
            "accumulate_grad_batches": int(trainer.accumulate_grad_batches),
            "optimizers": len(trainer.optimizers), "strategy": type(trainer.strategy).__name__,
            "automatic_optimization": not self._manual})
        # Lightning keeps torch.compile's settings on a module it compiles (fit of a compiled module).
        self._steps.start(trainer.strategy.root_device, pl_module,
                          compiled=getattr(pl_module, "_compiler_ctx", None) is not None)
        self._hook_fetch(trainer)
        for optimizer in trainer.optimizers:
            self._unhook.append(optimizer.register_step_post_hook(self._after_optimizer_step))

    def on_train_end(self, trainer, pl_module):
        self._finish(None)

    def on_exception(self, trainer, pl_module, exception):
        self._finish(exception)

    # -- a step -------------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._steps.enter("forward")

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        self._steps.enter("optimizer")

    def on_before_backward(self, trainer, pl_module, loss):
        self._steps.enter("backward")

    def on_after_backward(self, trainer, pl_module):
        self._resume()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._steps.enter("optimizer")

    def _after_optimizer_step(self, optimizer, args, kwargs):
        self._stepped = True
        self._resume()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # Accumulating, Lightning divides each micro-batch's loss by their number: their sum
        # is the update's mean loss.
        loss = _loss(outputs)
        if loss is not None:
            loss = loss.detach() if hasattr(loss, "detach") else loss
            self._loss = loss if self._loss is None else self._loss + loss
        if self._stepped:
            self._stepped = False
            loss, self._loss = self._loss, None
            self._steps.end_step(loss)
        else:  # accumulating: the update, and so the step, comes with a later batch
            self._steps.leave()

    def _resume(self):
        """Back in training_step's own code: under manual optimization that is the model's
        (forward); under automatic optimization, the loop's (other)."""
        if self._manual:
            self._steps.enter("forward")
        else:
            self._steps.leave()

    # -- data ---------------------------------------------------------------------------
    def _hook_fetch(self, trainer):
        """The epoch loop hands its `_on_before_fetch` to its data fetcher at every epoch's start:
        an instance attribute in its place marks each fetch's beginning as well."""
        loop = trainer.fit_loop.epoch_loop
        before = getattr(loop, "_on_before_fetch", None)
        if before is None:
            raise RuntimeError("gapscope: this Lightning version's training loop has no "
                               "_on_before_fetch; data_load cannot be timed")
        enter = self._steps.enter

        def on_before_fetch():
            enter("data_load")
            before()

        loop._on_before_fetch = on_before_fetch
        self._unhook.append(_Restore(loop, "_on_before_fetch"))

    def _finish(self, exc):
        for handle in self._unhook:
            handle.remove()
        self._unhook.clear()
        self._steps.finish(exc)


class _Restore:
    """Removes an instance attribute that shadows the class's method."""

    def __init__(self, owner, name: str):
        self._owner, self._name = owner, name

    def remove(self):
        self._owner.__dict__.pop(self._name, None)


def _loss(outputs):
    """training_step's loss: Lightning passes `{"loss": tensor, ...}` (or what a manual
    training_step returned)."""
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return outputs if outputs is None or hasattr(outputs, "item") or isinstance(outputs, (int, float)) else None
