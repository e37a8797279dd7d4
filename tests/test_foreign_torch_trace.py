"""A profile written by a user's own torch.profiler loop, with none of gapscope's marks."""
import pytest

import user_loops
from gapscope.analysis.results.distributed_breakdown import breakdown_of


@pytest.fixture(scope="module")
def user_trace_dir(tmp_path_factory):
    """The loop as the torch.profiler tutorial writes it: schedule, trace handler, prof.step()."""
    return user_loops.torch_profiler_tutorial(tmp_path_factory.mktemp("user_profile"))


def test_user_trace_phases_from_torch_markers(user_trace_dir):
    result = breakdown_of(user_trace_dir)
    result.self_check()
    assert len(result.steps) == 4
    assert result.framework == "torch" and result.source == "trace, raw" and result.compile_ms is None
    assert result.phase_sources == {"data_load": "framework markers", "forward": "inferred",
                                    "backward": "framework markers", "optimizer": "framework markers"}
    means = result.phase_means()
    assert all(means[p] > 0 for p in ("data_load", "forward", "backward", "optimizer"))
    assert result.unidentified_phases == []
