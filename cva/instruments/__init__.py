"""The contracts of a netting set (:mod:`cva.instruments.products`) and their closed forms
(:mod:`cva.instruments.analytic`)."""
