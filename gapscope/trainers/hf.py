"""`gapscope.trainers.hf.capture_trainer`: a Hugging Face `Trainer`'s training recorded as a
gapscope run directory, from a TrainerCallback and wrappers of the methods its hooks do not split."""
from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from gapscope.trainers.hook_steps import HookSteps


def capture_trainer(trainer, name: str = "hf", trace_steps: tuple[int, int] | None = (10, 15),
                    out: str | Path = "traces", *, warmup_steps: int | None = None,
                    layer_depth: int | None = 1) -> "GapscopeTrainerCallback":
    """Adds gapscope's callback to `trainer`; its next `train()` becomes the run directory
    `out/<name>-torch-user-<time>/` (`run_dir`):

        cap = capture_trainer(trainer, "my-run", trace_steps=(10, 15))
        trainer.train()

    The callback hooks mark neither forward from backward nor the batch fetch, so for the
    length of `train()` the trainer's own methods are wrapped (on the instance, undone at the
    end):
    - data_load: `get_batch_samples` (the fetch of every micro-batch of an update) and
      `_prepare_inputs` (their copy to the device);
    - forward: `compute_loss`;
    - backward: `accelerator.backward`;
    - optimizer: the hooks `on_pre_optimizer_step` to `on_step_end`: the update, the learning
      rate scheduler and zero_grad;
    - other: the rest, gradient clipping among it.

    A step is one optimizer update (`global_step`), all its micro-batches under gradient
    accumulation; logging, evaluation and saving after it are outside the steps. Under torchrun
    each rank writes `rank<r>/` of one job directory. Used as a context manager (`with ... as
    cap: trainer.train()`), a train() that raises is recorded as failed: the Trainer tells its
    callbacks only of a train() that ended.

    Layers: the trainer's model's, as the capture API's `model=` gives them (`layer_depth`: 1,
    the children that hold parameters; None: no layer ranges); none with `torch_compile=True`."""
    callback = GapscopeTrainerCallback(trainer, name, trace_steps, out, warmup_steps, layer_depth)
    trainer.add_callback(callback)
    return callback


class GapscopeTrainerCallback(TrainerCallback):
    """The callback `capture_trainer` adds; one train() per callback."""

    def __init__(self, trainer, name, trace_steps, out, warmup_steps, layer_depth=1):
        self._trainer = trainer
        self._steps = HookSteps(name, "gapscope.trainers.hf", trace_steps, out, warmup_steps,
                                layer_depth=layer_depth)
        self._wrapped: list[tuple[object, str]] = []
        self._losses: list = []
        # Between an update's fetch and its on_step_end: evaluation, which calls _prepare_inputs
        # and compute_loss too, runs outside it.
        self._in_update = [False]

    @property
    def run_dir(self) -> Path | None:
        return self._steps.run_dir

    @property
    def job_dir(self) -> Path | None:
        return self._steps.job_dir

    # -- the run ------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if self._steps.started:
            raise RuntimeError("gapscope: a capture_trainer callback records one train(); "
                               "call capture_trainer again for the next")
        self._steps.settings.update({
            "gradient_accumulation_steps": int(args.gradient_accumulation_steps),
            "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
            "max_grad_norm": args.max_grad_norm})
        self._steps.start(args.device, self._trainer.model, compiled=bool(args.torch_compile))
        trainer = self._trainer
        self._wrap(trainer, "get_batch_samples", "data_load", opens_update=True)
        self._wrap(trainer, "_prepare_inputs", "data_load")
        self._wrap(trainer, "compute_loss", "forward")
        # training_step's loss is the micro-batch's share of the update's (divided by the
        # accumulation steps or by the update's tokens): their sum is the update's loss.
        self._wrap(trainer, "training_step", None, self._losses)
        self._wrap(trainer.accelerator, "backward", "backward")

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._steps.enter("optimizer")

    def on_step_end(self, args, state, control, **kwargs):
        self._in_update[0] = False
        losses, self._losses[:] = list(self._losses), []
        self._steps.end_step(sum(losses) if losses else None)

    def on_train_end(self, args, state, control, **kwargs):
        self._finish(None)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._finish(exc)
        return False

    def _finish(self, exc):
        for owner, attribute in self._wrapped:
            owner.__dict__.pop(attribute, None)
        self._wrapped.clear()
        self._steps.finish(exc)

    # -- the wrappers -------------------------------------------------------------------
    def _wrap(self, owner, attribute: str, phase: str | None, losses: list | None = None,
              opens_update: bool = False) -> None:
        """`owner.attribute` as a phase (None: its result only is kept, in `losses`): an instance
        attribute in front of the class's method. Calls outside an update (evaluation's) pass
        through unmarked."""
        method = getattr(owner, attribute, None)
        if method is None:
            raise RuntimeError(f"gapscope: this transformers version's {type(owner).__name__} has no "
                               f"{attribute}; {phase} cannot be timed")
        enter, leave, in_update = self._steps.enter, self._steps.leave, self._in_update

        def marked(*args, **kwargs):
            if opens_update:
                in_update[0] = True
            elif not in_update[0]:
                return method(*args, **kwargs)
            if phase is None:
                result = method(*args, **kwargs)
            else:
                enter(phase)
                try:
                    result = method(*args, **kwargs)
                finally:
                    leave()
            if losses is not None:
                loss = result[0] if isinstance(result, tuple) else result
                losses.append(loss.detach() if hasattr(loss, "detach") else loss)
            return result

        setattr(owner, attribute, marked)
        self._wrapped.append((owner, attribute))
