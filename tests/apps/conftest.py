"""Fixtures shared by the application tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids thread-synchronisation overhead on loaded CPUs
    and keeps runs reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

