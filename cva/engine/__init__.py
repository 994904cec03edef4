"""The nested Monte Carlo engine: the plan of a run (:mod:`~cva.engine.plan`), Longstaff-Schwartz on inner
paths (:mod:`~cva.engine.lsm`, :mod:`~cva.engine.basis`), the per-path values of a chunk and the levels of
the estimators (:mod:`~cva.engine.nested`, :mod:`~cva.engine.estimators`), and plain LSM pricing at t = 0
(:mod:`~cva.engine.pricing`)."""
