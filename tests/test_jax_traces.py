"""JAX programs: phases from the transformations in HLO metadata (a hand-counted jitted step),
foreign JAX traces with StepTraceAnnotation or TraceAnnotation steps (real, recorded with jax
0.10.2 on the CPU), and the device name a GPU plane gives as an interned string.

The fixtures (tests/fixtures/jax_step/) come from one function, a two-layer step under
`jax.named_scope("dense1")`/`("dense2")`, MSE loss, plain SGD `p - 0.1 * g` (no optimizer scope):
`module_jit_train_step.after_optimizations.txt` is `train_step.lower(...).compile().as_text()`
for w1 4x8, w2 8x1 and a batch of 2 (the file-name/stack-frame tables and stack_frame_ids cut);
the XSpaces run it at w1 64x256, w2 256x1, batch 128 for three steps under jax.profiler with the
Python tracer off, each step in `StepTraceAnnotation("train", step_num=i)` or in
`TraceAnnotation("train_step")`."""
from __future__ import annotations

from collections import Counter

import pytest

from gapscope.analysis.events.hlo_metadata import MIXED
from gapscope.analysis.events.phase_rules import framework_phase, jax_phase, placed_name
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.measures.layer_times import scope_layer
from gapscope.analysis.readers.hlo_text import read_hlo_text
from gapscope.analysis.readers.xplane import read_xplane
from gapscope.analysis.readers import xplane_proto
from xspace_builder import PlaneBuilder, new_space

# Counted by hand off the entry computation (in XLA's schedule order): what each op's metadata
# op_names say. multiply_select_fusion fuses the ReLU mask of dense1's forward (jvp(dense1)/gt)
# into its backward select; bitcast_subtract_fusion fuses dense2's weight gradient
# (transpose(jvp(dense2))) into the SGD update after the gradients: both mixed. dot.4 (dense2's
# forward dot) and dot.5 (its weight gradient) lost their metadata in XLA's layout passes, and
# bitcast_bitcast_fusion.1 names only the parameter params['w2']: by place, forward before the
# first gradient op (multiply_select_fusion, 5th), backward before the last (bitcast_subtract_fusion).
HAND_COUNTED = {
    "bitcast_bitcast_fusion.1": ("fusion", "forward"),
    "ynn_fusion": ("fusion", "forward"),                  # jvp(dense1)/dot_general
    "broadcast_maximum_fusion": ("fusion", "forward"),    # jvp(dense1)/jit(relu)/max
    "dot.4": ("dot", "forward"),
    "multiply_select_fusion": ("fusion", MIXED),          # transpose(jvp(dense1)) + jvp(...)
    "reduce_multiply_fusion": ("fusion", "forward"),      # jvp()/div: the loss mean
    "bitcast_bitcast_fusion": ("fusion", "forward"),      # jvp()/sub
    "dot.2": ("dot", "backward"),                         # transpose(jvp(dense1))/transpose
    "dot.5": ("dot", "backward"),
    "multiply_subtract_fusion": ("fusion", "optimizer"),  # jit(train_step)/sub, after the gradients
    "bitcast_subtract_fusion": ("fusion", MIXED),         # the update + transpose(jvp(dense2))
}


@pytest.fixture(scope="module")
def hand_counted(fixtures_dir):
    return read_hlo_text(fixtures_dir / "jax_step" / "module_jit_train_step.after_optimizations.txt")


def test_a_jitted_steps_ops_get_the_phases_counted_by_hand(hand_counted):
    module, ops = hand_counted
    assert module == "jit_train_step"
    assert {name: (op.opcode, op.phase) for name, op in ops.items()} == HAND_COUNTED
    assert list(ops) == list(HAND_COUNTED)  # the schedule's order, which phases the unnamed ops
    assert Counter(op.phase for op in ops.values()) == {"forward": 6, "backward": 2, "optimizer": 1, MIXED: 2}
    assert ops["multiply_select_fusion"].phases == ("backward", "forward")
    assert ops["bitcast_subtract_fusion"].phases == ("backward", "optimizer")
    # The update has no transformation in its names: its place after the first gradient op
    # (multiply_select_fusion) makes it the optimizer's, and its annotation says so.
    assert ops["multiply_subtract_fusion"].by_order == "optimizer"
    assert ops["multiply_subtract_fusion"].framework_op == "jit(train_step)/sub (placed in optimizer)"
    # The timeline classifies each op's annotation as the kernel view classifies the op.
    for name in ("ynn_fusion", "dot.2", "multiply_subtract_fusion", "reduce_multiply_fusion", "dot.5"):
        assert framework_phase(ops[name].framework_op) == ops[name].phase
    assert ops["dot.5"].framework_op == "dot.5 (placed in backward)"


def test_the_layers_of_a_jitted_step_come_from_the_scopes_inside_the_transformations(hand_counted):
    _, ops = hand_counted
    known = {"dense1", "dense2"}
    layers = {name: sorted({w for w in (scope_layer(n, known) for n in op.op_names) if w})
              for name, op in ops.items()}
    assert layers["ynn_fusion"] == [("dense1", "forward")]
    assert layers["dot.2"] == [("dense1", "backward")]
    # A fusion of two layers and both phases: several places, so outside layers (never split).
    assert layers["multiply_select_fusion"] == [("dense1", "backward"), ("dense1", "forward"),
                                                ("dense2", "backward"), ("dense2", "forward")]
    assert layers["multiply_subtract_fusion"] == []
    assert scope_layer("jit(train_step)/transpose(jvp(compile_loss))/sparse_categorical_crossentropy/div",
                       set()) == ("loss", "backward")
    assert scope_layer("jit(train_step)/jvp(cnn)/conv1/conv_general_dilated", {"conv1"}) == ("conv1", "forward")
    # Inference: no transformation at all; a known layer's scope is its forward.
    assert scope_layer("jit(predict_step)/dense1/dot_general", {"dense1"}) == ("dense1", "forward")
    assert scope_layer("jit(train_step)/rm_sprop/add", {"dense1"}) is None


def test_jax_names_give_their_phase():
    assert jax_phase("jit(train_step)/transpose(jvp(conv1))/conv_general_dilated") == "backward"
    assert jax_phase("jit(train_step)/jvp(conv1)/jit(relu)/max") == "forward"
    assert jax_phase("jit(train_step)/rm_sprop/add") == "optimizer"
    assert jax_phase("jit(train_step)/add") is None
    # JAX joins the names of an op made from two with ';'
    assert jax_phase("jit(f)/transpose(jvp())/mul;jit(f)/transpose(jvp())/broadcast_in_dim") == "backward"
    assert framework_phase(placed_name("jit(train_step)/add", "optimizer")) == "optimizer"
    assert framework_phase(placed_name("jit(predict_step)/add", "forward")) == "forward"


@pytest.fixture(scope="module")
def step_annotated(fixtures_dir):
    trace = read_xplane(fixtures_dir / "jax_step" / "step_annotated.xplane.pb")
    return trace, phase_timeline(trace)


def test_a_step_annotated_jax_trace_gets_steps_and_phases(step_annotated):
    trace, timeline = step_annotated
    assert trace.metadata["framework"] == "jax"
    assert [(s.name, s.step_num) for s in timeline.steps] == [("train", 0), ("train", 1), ("train", 2)]
    # Step 1's thunks, taken off the trace by hand (µs): forward bitcast_bitcast_fusion.1 0.791
    # and dot.4 1.622 (no name of the program: before the first gradient op), ynn_fusion 86.047,
    # broadcast_maximum_fusion 48.802, subtract_multiply_fusion 0.41, wrapped_reduce-window
    # 0.691, reduce_multiply_fusion 0.31; backward multiply_select_fusion 1.872 (root
    # transpose(jvp(dense1))), bitcast_bitcast_fusion 0.311, dot.2 164.304, dot.5 1.823 (no name:
    # between the gradient ops); optimizer multiply_subtract_fusion 1.753, bitcast_subtract_fusion
    # 0.331 (root: the update).
    phases = timeline.phase_ms(1)
    assert phases["forward"] * 1000 == pytest.approx(0.791 + 86.047 + 48.802 + 1.622 + 0.41 + 0.691 + 0.31, abs=1e-3)
    assert phases["backward"] * 1000 == pytest.approx(1.872 + 0.311 + 164.304 + 1.823, abs=1e-3)
    assert phases["optimizer"] * 1000 == pytest.approx(1.753 + 0.331, abs=1e-3)
    assert phases["data_load"] == 0.0


def test_trace_annotation_steps_are_found_and_without_them_the_trace_is_one_window(fixtures_dir, tmp_path):
    path = fixtures_dir / "jax_step" / "trace_annotated.xplane.pb"
    trace = read_xplane(path)
    timeline = phase_timeline(trace)
    assert [(s.name, s.step_num) for s in timeline.steps] == [("train_step", 0), ("train_step", 1),
                                                               ("train_step", 2)]
    assert all(timeline.phase_ms(i)["backward"] > 0 and timeline.phase_ms(i)["optimizer"] > 0
               for i in range(3))
    # The same trace without its annotations: one window and the warning, as before.
    space = xplane_proto.xplane_pb2().XSpace()
    space.ParseFromString(path.read_bytes())
    for plane in space.planes:
        marks = {k for k, m in plane.event_metadata.items() if m.name == "train_step"}
        for line in plane.lines:
            kept = [e for e in line.events if e.metadata_id not in marks]
            del line.events[:]
            line.events.extend(kept)
    bare = tmp_path / "bare.xplane.pb"
    bare.write_bytes(space.SerializeToString())
    timeline = phase_timeline(read_xplane(bare))
    assert [s.name for s in timeline.steps] == ["whole trace"]
    assert any(note.startswith("warning: the trace holds no step markers") for note in timeline.notes)


@pytest.mark.parametrize("encoding", ["ref", "bytes", "str"])
def test_a_device_plane_names_its_device_however_the_string_is_stored(tmp_path, encoding):
    """XLA's GPU tracers intern the device's name ("AMD GPU - gfx942") as a stat metadata entry
    and store a reference to it: the reader read the reference's number and named no device."""
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    host.event(host.line(1, "python"), "train", 0, 100, step_num=0, _r=1)
    gpu = PlaneBuilder(space, 2, "/device:GPU:0")
    gpu.event(gpu.line(1, "Stream #1(Kernel)"), "fusion_1", 10, 20)
    stat = gpu.plane.stats.add(metadata_id=gpu.stat("device_type_string"))
    if encoding == "ref":
        stat.ref_value = gpu.stat("AMD GPU - gfx942")
    elif encoding == "bytes":
        stat.bytes_value = b"AMD GPU - gfx942"
    else:
        stat.str_value = "AMD GPU - gfx942"
    path = tmp_path / "rocm.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert read_xplane(path).metadata["device_properties"] == [{"id": 2, "name": "AMD GPU - gfx942"}]


def test_a_retrace_for_a_new_shape_is_recorded_with_jaxs_reason(tmp_path):
    """JaxCompileLog on a real jitted function called with a second shape: JAX traces, lowers and
    compiles it twice, and its cache-miss explanation names the argument whose shape changed."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from gapscope.analysis.readers.compile_records import read_compile_records, steps_compiling_after
    from gapscope.analysis.results.compile_why import compile_why
    from gapscope.workloads.runners.jax_compiles import JaxCompileLog

    step = {"now": 0}
    log = JaxCompileLog(step_of=lambda: step["now"])
    explained = jax.config.jax_explain_cache_misses

    @jax.jit
    def scaled_sum(batch):
        return (batch * 2.0).sum()

    log.start()
    try:
        scaled_sum(jnp.ones(4)).block_until_ready()
        step["now"] = 1
        scaled_sum(jnp.ones(4)).block_until_ready()   # cached: nothing new
        step["now"] = 7
        scaled_sum(jnp.ones(5)).block_until_ready()   # a partial last batch: a new shape
    finally:
        log.stop()
    assert jax.config.jax_explain_cache_misses == explained  # put back as it was
    log.write(tmp_path)
    ours = [e for e in log.events if e["function"] in ("scaled_sum", "jit(scaled_sum)")]
    assert [(e["stage"], e["step"]) for e in ours] == [
        ("jax_trace", 0), ("lower", 0), ("xla_compile", 0), ("jax_trace", 7), ("lower", 7), ("xla_compile", 7)]
    (miss,) = [m for m in log.misses if m["function"] == "scaled_sum" and not m["first"]]
    assert miss["step"] == 7 and "now f32[5] and before f32[4]" in miss["reason"]
    records = read_compile_records(tmp_path)
    assert steps_compiling_after(records, warmup_steps=2) == [7]
    why = compile_why(records, None, warmup_steps=2)
    assert why.tf_traces["scaled_sum"] == 2
    assert [(r.function, r.step) for r in why.retraces] == [("scaled_sum", 7)]
    assert why.steady_events[7].startswith("retrace of scaled_sum:")


LOOP_PROGRAM = """HloModule jit_train_step, is_scheduled=true

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %h = f32[4]{0} get-tuple-element(%p), index=1
  %dot.13 = f32[4]{0} multiply(%h, %h)
  %tanh.1 = f32[4]{0} tanh(%dot.13), metadata={op_name="jit(train_step)/transpose(jvp(lstm))/while/body/tanh"}
  ROOT %t = (s32[], f32[4]{0}) tuple(%i, %tanh.1)
}

%cond (p.1: (s32[], f32[4])) -> pred[] {
  %p.1 = (s32[], f32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%p.1), index=0
  %c = s32[] constant(4)
  ROOT %lt = pred[] compare(%i.1, %c), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %fwd = f32[4]{0} tanh(%x), metadata={op_name="jit(train_step)/jvp(lstm)/while/body/tanh"}
  %zero = s32[] constant(0)
  %t0 = (s32[], f32[4]{0}) tuple(%zero, %fwd)
  %while.1 = (s32[], f32[4]{0}) while(%t0), condition=%cond, body=%body, metadata={op_name="jit(train_step)/transpose(jvp(lstm))/while"}
  %g = f32[4]{0} get-tuple-element(%while.1), index=1
  ROOT %upd = f32[4]{0} subtract(%x, %g), metadata={op_name="jit(train_step)/sub"}
}
"""


def test_the_ops_a_jax_loop_runs_take_their_loops_phase(tmp_path):
    """Hand-written: an LSTM's backward scan as a while loop. XLA runs its body's and condition's
    instructions as thunks of their own (dot.13, tanh.1, lt), which the entry alone did not hold:
    the real LSTM's backward read 3.7 ms where it was 13.4. Named ones by their names, the rest
    by the loop's own name (transpose(jvp(lstm))/while: backward)."""
    path = tmp_path / "module_loop.after_optimizations.txt"
    path.write_text(LOOP_PROGRAM)
    _, ops = read_hlo_text(path)
    assert {name: op.phase for name, op in ops.items()} == {
        "fwd": "forward", "while.1": "backward", "upd": "optimizer",
        "dot.13": "backward", "tanh.1": "backward", "lt": "backward"}
    assert ops["dot.13"].by_order == "backward" and ops["tanh.1"].by_order is None
    assert framework_phase(ops["dot.13"].framework_op) == "backward"
    assert scope_layer(ops["tanh.1"].op_name, {"lstm"}) == ("lstm", "backward")
