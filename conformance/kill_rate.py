"""The entry point of ``python -m conformance.kill_rate``, the mutant
harness' command (``sdpa-conformance mutants`` runs the same ``main``). The
harness lives in the package conformance.kill: its arguments and ``main`` in
conformance/kill/cli.py, what each of its other modules holds in
conformance/kill/__init__.py."""

import sys

from conformance.kill.cli import main, parser

if __name__ == "__main__":
    sys.exit(main(parser().parse_args()))
