"""Collateral of a netting set under a CSA, ORE's classical model: the collateral held at t is set by the
margin call at t - MPR (the margin period of risk), C(t) = IA + (V(t - MPR) - H)^+ - (-V(t - MPR) - H)^+ (only the
first term where the counterparty alone posts, only the second where we alone post), no call smaller than the
minimum transfer amount, and only the independent amount where t - MPR is not after 0. The exposure is then
(V(t) - C(t))^+, the negative exposure (V(t) - C(t))^-.

For the allocation to trades, the collateral is shared as Pykhtin & Rosen ("Pricing counterparty risk at the
trade level and CVA allocations", J. Credit Risk 6, 2010) share it: the margin call in proportion to each
trade's value at the margin date, c_i = call q_i V_i(t - MPR) / V(t - MPR), and the independent amount in
equal parts; the shares add up to C(t) path by path (:meth:`cva.xva.desk.Book.aggregate`)."""

from __future__ import annotations

import numpy as np

from linalg_gpu._backend import get_array_module


def collateral(V_lag, csa):
    """C from the values at the margin dates (any shape; numpy or cupy)."""
    xp = get_array_module(V_lag)
    call = xp.zeros_like(V_lag)
    if csa.posting != "us":
        call = call + xp.maximum(V_lag - csa.threshold, 0.0)
    if csa.posting != "counterparty":
        call = call - xp.maximum(-V_lag - csa.threshold, 0.0)
    return xp.where(xp.abs(call) < csa.minimum_transfer_amount, 0.0, call) + csa.independent_amount


def net_of_collateral(P, plan, csa, margin_cols=None):
    """The values (..., K) at the exposure dates net of the collateral, from the netted values (..., V) of the value
    cube's columns (:attr:`cva.engine.plan.Plan.value_index`); without a CSA the exposure dates' values as they are.
    ``margin_cols``: the columns of t_k - MPR (:func:`cva.engine.plan.margin_columns`; default the plan's)."""
    values = P[..., plan.exposure_cols]
    if csa is None:
        return values
    xp = get_array_module(P)
    lag = plan.margin_cols if margin_cols is None else margin_cols
    C = collateral(P[..., np.where(lag >= 0, lag, 0)], csa)
    return values - xp.where(xp.asarray(lag >= 0), C, csa.independent_amount)
