"""`python -m spica_lib.cli`: the same as the `spica` command."""

import sys

from spica_lib.cli.main import main

sys.exit(main())
