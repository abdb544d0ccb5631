"""``python -m api.cli``: the ``seqsketch`` command."""

import sys

from api.cli import main

sys.exit(main())
