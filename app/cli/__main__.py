"""`python -m app.cli`: the `quadrat` command."""

import sys

from app.cli import main

sys.exit(main())
