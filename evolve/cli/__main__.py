"""``python -m evolve.cli``: the ``memevolve`` command."""
import sys

from evolve.cli.main import main

sys.exit(main())
