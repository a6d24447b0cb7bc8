"""``python -m evolve.cli``: the ``memevolve`` command."""
import sys

from evolve.cli.main import main

if __name__ == "__main__":  # a process multiprocessing spawns may import this module
    sys.exit(main())
