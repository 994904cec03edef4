"""From the per-path values to the CVA: credit curves (:mod:`cva.xva.credit`), the exposure measures and the
estimate (:mod:`cva.xva.measures`)."""
