"""Per-layer record_function ranges (`gapscope_layer/<name>`) around the named layers' forward
calls, with an NVTX range of the same name as the phases have, attached only for the traced
window so that unprofiled steps run without any hook."""
from __future__ import annotations

from gapscope.profilers.phases import LAYER_RANGE_PREFIX


class LayerRanges:
    """Forward pre/post hooks on each named module that open and close its range.

    Backward needs no hook: the trace links each autograd node to the forward op that made it
    by its sequence number, and so to the layer range around that op (analysis.measures.layer_times)."""

    def __init__(self, modules: dict):
        self.modules = modules
        self._handles: list = []

    def attach(self) -> None:
        if self._handles:
            return
        import nvtx

        from gapscope.profilers.marks import NVTX_DOMAIN
        domain = nvtx.get_domain(NVTX_DOMAIN)
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_pre_hook(
                _opener(LAYER_RANGE_PREFIX + name, domain)))
            self._handles.append(module.register_forward_hook(_closer(domain), always_call=True))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _opener(range_name: str, domain):
    from torch.profiler import record_function
    push, attributes = domain.push_range, domain.get_event_attributes(message=range_name)

    def open_range(module, args):
        push(attributes)
        marked = record_function(range_name)
        marked.__enter__()
        # A stack, not one slot: a module called again inside its own forward nests.
        module.__dict__.setdefault("_gapscope_ranges", []).append(marked)
    return open_range


def _closer(domain):
    pop = domain.pop_range

    def close_range(module, args, output):
        module._gapscope_ranges.pop().__exit__(None, None, None)
        pop()
    return close_range
