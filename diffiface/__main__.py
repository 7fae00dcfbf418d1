"""``python -m diffiface``: the same as the ``diffiface`` command."""

import sys

from ._cli import main

sys.exit(main())
