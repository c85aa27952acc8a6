"""The figures of `phasejax bench`, by job: `record` (timing, the environment record, one figure's entry),
`programs` (compilation), `solves` (the state evolution), `diagrams` (phase diagrams), `training`. Each figure is
a function returning a plain dict; `phasejax.bench` registers them (`FIGURES`, `run_figure`) and writes the
record."""
