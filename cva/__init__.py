"""cva: the nested Monte Carlo CVA engine on :mod:`linalg_gpu`.

``cva.run(config)`` runs the nested Monte Carlo CVA and writes the run directory;
``cva.price(config)`` prices each contract of a config at t = 0 (plain Longstaff-Schwartz);
the pieces are :mod:`cva.market.model` (correlated Black-Scholes), :mod:`cva.instruments.products`,
:mod:`cva.engine.basis`, :mod:`cva.engine.lsm` and :mod:`cva.market.rng` (keyed Philox streams).
"""

__version__ = "0.1.0"


def price(config, backend=None, paths=None, out_of_sample=None):
    """The t = 0 price of each contract of ``config``; see :func:`cva.engine.pricing.price`."""
    from cva.engine.pricing import price as _price

    return _price(config, backend=backend, paths=paths, out_of_sample=out_of_sample)


def run(config, out=None, backend=None, resume=False, chunk=None, progress=True, **options):
    """The nested Monte Carlo CVA of ``config``; see :func:`cva.runner.run` (``overwrite``, ``keep_chunks``,
    ``confirm``, ``write=False`` for no run directory, ``log``)."""
    from cva.runner import run as _run

    return _run(config, out=out, backend=backend, resume=resume, chunk=chunk, progress=progress, **options)


__all__ = ["price", "run"]
