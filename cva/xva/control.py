"""A control variate for the nested CVA: the netting set's European twin, in closed form along the outer paths.

Each contract on one asset (or any contract in a one-asset market) has a European twin: the European option of
the same payoff, strike and maturity, valued by Black-Scholes at the outer path's state. The twin netting set's
value E(t) = sum_c q_c V^E_c(t, S(t)) (0 after a twin's maturity, its payoff at it) is a martingale once
discounted, so E[E(t_k)] = e^{r t_k} sum_c q_c V^E_c(0) over the twins alive at t_k: K controls of known means,
one per exposure date. The estimator's per-path value F is fitted on them by least squares and the fit's known
part taken out, mean(F) - (mean(E) - E[E]) beta (Glasserman, "Monte Carlo Methods in Financial Engineering",
section 4.1.2): the variance falls by the share of F that the twins explain; the bias of the fitted beta is
O(K / N). A Bermudan's exposure follows its twin until it is exercised and is 0 after, so the early dates carry
most of the fit. Contracts without a twin (options on a basket of several assets, on the max or the min) add
nothing.

The outer paths are drawn again from their keys (the engine's, on the CPU), so the control needs nothing from the
chunks and works the same after a resume or on a cluster.
"""

from __future__ import annotations

import numpy as np

from cva.engine.nested import MLMC_LEVEL_PATHS, outer_paths
from cva.instruments.analytic import black_scholes_array, closed_form_price
from cva.instruments.products import Contract


def twins(plan, model, quantities) -> list[tuple[int, Contract, float]]:
    """(asset, European twin, quantity) of each contract that has one."""
    out = []
    for c, q in zip(plan.contracts, quantities, strict=True):
        if c.payoff in ("call", "put") and (c.underlying == "asset" or model.d == 1):
            a = c.asset if c.underlying == "asset" else 0
            out.append((a, Contract("european", c.payoff, "asset", c.strike, c.maturity, asset=a), float(q)))
    return out


def twin_values(plan, model, quantities, S) -> np.ndarray:
    """E(t_k) per outer path, (N, K), from the states S (N, K, d) at the exposure dates."""
    E = np.zeros(S.shape[:2])
    for a, c, q in twins(plan, model, quantities):
        for k, t in enumerate(plan.dates):
            tau = c.maturity - t
            if tau > 1e-12 * max(c.maturity, 1.0):
                E[:, k] += q * black_scholes_array(S[:, k, a], c.strike, tau, model.rate, model.dividend[a],
                                                   model.vol[a], c.payoff)
            elif tau > -1e-12 * max(c.maturity, 1.0):                          # at maturity: the payoff
                E[:, k] += q * c.payoff_value(S[:, k])
    return E


def twin_means(plan, model, quantities) -> np.ndarray:
    """E[E(t_k)], (K,): e^{r t_k} times the twins' prices today, over the twins alive at t_k."""
    m = np.zeros(len(plan.dates))
    for _, c, q in twins(plan, model, quantities):
        alive = plan.dates <= c.maturity * (1 + 1e-12)
        m += np.where(alive, q * closed_form_price(c, model) * np.exp(model.rate * plan.dates), 0.0)
    return m


def outer_states(cfg, plan, model, level) -> np.ndarray:
    """The level's outer paths at the exposure dates, (N, K, d) float64, drawn again from the engine's keys."""
    S = outer_paths(cfg, plan, model, level.index * MLMC_LEVEL_PATHS, level.paths)       # (N, G, d)
    return np.asarray(S[:, plan.exposure_index], dtype=np.float64)


def european_twin(cfg, plan, model, quantities, levels):
    """(E per level (N_l, K), E[E] (K,)), or None where no contract has a twin."""
    if not twins(plan, model, quantities):
        return None
    return ([twin_values(plan, model, quantities, outer_states(cfg, plan, model, lv)) for lv in levels],
            twin_means(plan, model, quantities))
