# %% [markdown]
# # gapscope in a notebook
#
# The objects `gapscope compare` prints, in Python: compare two runs, read the verdict as fields,
# look at the phases and layers as DataFrames, then measure two configurations interleaved.
# Each `# %%` is a cell (Jupyter, VS Code and PyCharm open this file as a notebook;
# `python docs/notebook.py` runs it whole, from the repository's root). The test suite runs it.

# %%
import os

import gapscope

# Two runs made by `gapscope run cnn --framework torch` and `--framework keras`; the repository
# keeps two such runs (one traced step each) in tests/fixtures/cnn_cpu.
torch_run, keras_run = "tests/fixtures/cnn_cpu/torch", "tests/fixtures/cnn_cpu/keras"
run = gapscope.load(torch_run)
print(run.label, run.manifest["variant"], run.manifest["machine_load"]["others_cpu_pct"], "% busy")

# %% [markdown]
# `compare` returns the Comparison the CLI renders. Its `verdict` is slower, faster,
# within_noise or inconclusive: these two runs were recorded while other processes took the
# cores, so there is no verdict, and the reason says why (`gapscope compare` exits 3).

# %%
comparison = gapscope.compare(torch_run, keras_run)
print(comparison.verdict, comparison.verdict.inconclusive, comparison.verdict.reason)
phases = comparison.to_pandas()               # one row per phase
print(phases[["a_ms", "b_ms", "delta_ms", "share_of_gap"]])

# %% [markdown]
# Per layer, where both runs name the same layers (here the Keras run against itself):

# %%
layers = gapscope.compare(keras_run, keras_run).to_pandas(by="layer")
print(layers[["a_forward_ms", "a_backward_ms"]])

# %% [markdown]
# Measuring: the configurations run now, interleaved (A B, B A, ...), each repeat a fresh
# process, into one A/B folder under `out` (default: $GAPSCOPE_OUT, else `traces`). Small
# here so that the example runs in seconds; keep the defaults (5 repeats of 60 steps) for an
# answer, or give `precision=0.03` to repeat until the ratio is within ±3 %.

# %%
measured = gapscope.measure("linreg:torch", "linreg:torch:preload", repeats=2, steps=10, warmup=2,
                            trace_steps=2, out=os.environ.get("GAPSCOPE_OUT", "traces"))
pair = measured.pairs[0]
print(measured.verdict, pair.ratio, pair.ratio_ci95)
if measured.verdict.inconclusive:
    print("measure again on a quiet machine:", measured.verdict.reason)
for suggestion in pair.suggestions:          # what to try next, as a configuration
    print("try", suggestion.suggested)
