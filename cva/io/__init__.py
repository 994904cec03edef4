"""Input and output: the validated configuration (:mod:`cva.io.config`, its reference :mod:`cva.io.schema`),
the run directory (:mod:`cva.io.rundir`) and the report (:mod:`cva.io.report`)."""
