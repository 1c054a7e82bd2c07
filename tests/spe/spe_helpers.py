"""What the SPE tests share: a fixed loss over several filters (layers) applying one code."""

import torch


def layers_loss(pe, filters, inputs, eps, code, weights):
    """(outputs, loss, leaves) of filters over one code: each filter's (qhat, khat) for its inputs
    (q, k) and gate noise, the loss sum(qhat * weights) + sum((khat * flipped weights)^2) over the
    layers, and the tensors to differentiate it by (inputs, gates, generator parameters)."""
    loss, outs = 0, []
    for filt, (q, k), e in zip(filters, inputs, eps):
        qhat, khat = filt(q, k, code, gate_noise=e)
        outs += [qhat, khat]
        loss = loss + (qhat * weights).sum() + (khat * weights.flip(1)).square().sum()
    leaves = [t for pair in inputs for t in pair] + [p for m in [pe, *filters] for p in m.parameters()]
    return outs, loss, leaves
