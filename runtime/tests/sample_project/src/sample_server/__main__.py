"""`python -m <package>` is the same as the console script."""

from .cli import main

raise SystemExit(main())
