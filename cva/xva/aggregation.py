"""A run's aggregation of each chunk's value cube where it was computed (:meth:`cva.xva.desk.Book.aggregate`; with
sensitivities, :meth:`cva.xva.sensitivities.BumpedDesk.aggregate`), as a callable that travels to a cluster's
workers as the run's configuration and is built again there, once per process and configuration
(:func:`aggregation_of`). Sent as itself, with the book's arrays and the plan, a chunk task took 75-157 ms from
its submission to its start on a LocalCluster of a 2-CPU machine, against 4-7 ms for the configuration alone."""

from __future__ import annotations

import functools

from cva.xva.desk import Book
from cva.xva.sensitivities import BumpedDesk


class Aggregation:
    """``aggregation(cube, ...)`` is the run's aggregate of a chunk's cube; ``book`` and ``bumped`` (None without
    sensitivities) are the run's :class:`~cva.xva.desk.Book` and :class:`~cva.xva.sensitivities.BumpedDesk`."""

    def __init__(self, cfg, plan, model, config_json=None):
        self.book = Book.of_config(cfg, plan, model)
        self.bumped = BumpedDesk(cfg, plan, model, self.book) if cfg.sensitivities is not None else None
        self._aggregate = (self.book if self.bumped is None else self.bumped).aggregate
        self._cfg, self._config_json = cfg, config_json

    def __call__(self, *args, **kwargs):
        return self._aggregate(*args, **kwargs)

    def __reduce__(self):
        if self._config_json is None:
            self._config_json = self._cfg.to_json()
        return aggregation_of, (self._config_json,)


@functools.lru_cache(maxsize=8)
def aggregation_of(config_json) -> Aggregation:
    """The :class:`Aggregation` of the configuration ``config_json`` (a cluster worker's, built once, from the
    worker's config, plan and model: :func:`cva.engine.cluster.run_inputs`)."""
    from cva.engine.cluster import run_inputs

    return Aggregation(*run_inputs(config_json), config_json)
