"""forward_state: a forward pass continued from a recurrent state (training with state passing)."""

from __future__ import annotations

import pytest
import torch

from model import detach_state


@pytest.mark.parametrize("decay_horizon", [0, 16])
def test_segments_with_carried_state_equal_one_forward(make_model, tokens, decay_horizon):
    """Two segments, the second from the state the first left, give the logits and the summed loss of
    one parallel forward over the whole sequence (same positional noise)."""
    model = make_model(decay_horizon=decay_horizon).double()
    length = tokens.shape[1]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    noise = model.draw_positional_noise(length, generator=torch.Generator().manual_seed(3))
    whole, whole_loss = model(inputs, targets, positional_noise=noise, reduction="sum")
    state = model.init_state(tokens.shape[0], noise)
    cut = 9
    first, loss_a, state = model.forward_state(inputs[:, :cut], targets[:, :cut], state, reduction="sum")
    second, loss_b, state = model.forward_state(inputs[:, cut:], targets[:, cut:], state, reduction="sum")
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(loss_a + loss_b, whole_loss, rtol=1e-9, atol=1e-9)
    assert state.position == length - 1


def test_gradients_stop_at_a_detached_state(make_model, tokens):
    """Backpropagation through a detached state reaches the parameters but not the earlier segment."""
    model = make_model(decay_horizon=16).train()
    state = model.init_state(tokens.shape[0])
    embedded = []
    model.embedding.register_forward_hook(lambda module, args, out: embedded.append(out))
    _, _, state = model.forward_state(tokens[:, :8], None, state)
    kept = detach_state(state)
    assert all(not layer.kv.requires_grad for layer in kept.layers)
    _, loss, _ = model.forward_state(tokens[:, 8:-1], tokens[:, 9:], kept)
    loss.backward()
    assert model.head.weight.grad is not None and model.head.weight.grad.abs().sum() > 0
    assert embedded[0].grad_fn is not None  # the first segment was in the graph, but not reached:
    assert all(layer.kv.grad_fn is not None for layer in state.layers)  # its state kept its own graph
