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
    sensitivities) are the run's :class:`~cva.xva.desk.Book` and :class:`~cva.xva.sensitivities.BumpedDesk`, built
    when first used or by :meth:`build`: a cluster's client builds them once it has submitted the first chunks
    (:meth:`cva.engine.nested.Levels.ensure`), while the workers compute (0.02-0.04 s of the desk benchmark's run
    on an H200's host before its first task could be submitted)."""

    def __init__(self, cfg, plan, model, config_json=None):
        self._cfg, self._plan, self._model, self._config_json = cfg, plan, model, config_json

    @functools.cached_property
    def book(self) -> Book:
        return Book.of_config(self._cfg, self._plan, self._model)

    @functools.cached_property
    def bumped(self) -> BumpedDesk | None:
        if self._cfg.sensitivities is None:
            return None
        return BumpedDesk(self._cfg, self._plan, self._model, self.book)

    def build(self):
        """The book and the bumped desk built now (if not yet)."""
        return self.book, self.bumped

    def __call__(self, *args, **kwargs):
        return (self.book if self.bumped is None else self.bumped).aggregate(*args, **kwargs)

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
