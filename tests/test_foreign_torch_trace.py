"""A profile written by a user's own torch.profiler loop, with none of gapscope's marks."""
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from analysis.breakdown import breakdown_of


@pytest.fixture(scope="module")
def user_trace_dir(tmp_path_factory):
    """The loop as the torch.profiler tutorial writes it: schedule, trace handler, prof.step()."""
    out = tmp_path_factory.mktemp("user_profile")
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(2048, 100), torch.randint(0, 10, (2048,))),
                        batch_size=256, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(100, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out))) as prof:
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            prof.step()
    return out


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
