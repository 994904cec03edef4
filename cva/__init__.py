"""cva: the nested Monte Carlo CVA engine (model, products, LSM, nested engine, reports).

Only the package exists so far; the engine arrives with the market/LSM and CVA issues
(see the README's status table). It builds on :mod:`linalg_gpu`.
"""

__version__ = "0.1.0"
