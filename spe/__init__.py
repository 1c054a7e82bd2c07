"""Stochastic Positional Encoding (SPE), Liutkus et al., ICML 2021.

A code generator (`SineSPE` or `ConvSPE`) draws R realisations of two zero-mean Gaussian processes
Qbar_d, Kbar_d per (head, feature d) whose cross-covariance is a relative positional kernel
P_d(m, n). `SPEFilter` mixes them into queries and keys:

    qhat(m) = sum_d q_d(m) Qbar_d(m, :),   khat(n) = sum_d k_d(n) Kbar_d(n, :)     (R-vectors)

Normalisation (kept from the reference package). Each code is divided by (R D)^(1/4), so that

    E[ sum_r Qbar_d(m, r) Kbar_d(n, r) ] = sqrt(R / D) * P_d(m, n)

with P_d in "template units" (`pe.expected_template(length)`, e.g. (1/2K) sum_k lambda_k^2
cos(2 pi f_k (m - n) + theta_k) for sineSPE). The attention then applies the usual 1/sqrt(R)
temperature to qhat . khat (split as R^(-1/4) on each side before a feature map), which gives the
expected logit sum_d q_d(m) P_d(m, n) k_d(n) / sqrt(D): softmax attention with a positional kernel.

A gated filter mixes in a position-free noise eps ~ N(0, 1) / (D R)^(1/4), constant over positions,
with weight delta = sigmoid(gate) per (head, d); its effective kernel is (1 - delta) P_d + delta.
"""

from spe.conv import ConvSPE
from spe.filter import SPEFilter
from spe.shared import SharedCode
from spe.sine import SineSPE
from spe.workspace import Workspace

__all__ = ["SineSPE", "ConvSPE", "SPEFilter", "SharedCode", "Workspace"]
