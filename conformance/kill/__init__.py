"""The mutant harness (``sdpa-conformance mutants``, ``python -m
conformance.kill_rate``): plants source rewrites in the kernels and searches
the suite's properties for a failure. What it does, its verdicts and exit
statuses: the docstring of conformance.kill.cli. Its modules, each importing
only those above it:

- catalogue: the report's defaults, each kernel family's control, catalogue
  and adapter (``HARNESS``), the flavors a rewritten file serves, the cap
- kinds: the property searches (``KINDS``, derived from properties.matrix)
  and which of them a mutant gets
- failures: the verdict of one failing example
- replay: a kill's Cases replayed on the pristine kernels (or in a fresh
  process), a worker's process state
- search: one mutant's Hypothesis searches, their units and the record
  merged from them
- worker: one process's share of a mutant's units (a spawned worker)
- processes: every mutant over processes (``run_all``), the progress lines
- tally: the kill rate, what makes a run invalid, the exit status, the table
- resume: the partial report ``--resume`` reads, the reports written, and
  ``Usage`` (the exit-2 error it and cli raise)
- cli: the arguments, their validation and ``main``
"""
