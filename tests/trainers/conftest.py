import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread(request):
    """The trainer tests use tiny models: intra-op threads gain nothing on such small
    tensors, and on a busy machine their hand-offs cost more than the work."""
    if request.node.get_closest_marker("slow"):  # the long runs use every core
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
