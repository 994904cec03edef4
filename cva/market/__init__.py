"""The market: keyed random streams (:mod:`cva.market.rng`, Philox) and the correlated d-asset
Black-Scholes model with its exact log-normal paths (:mod:`cva.market.model`); their CUDA kernels are in
``cuda/``."""
