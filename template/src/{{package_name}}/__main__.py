# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`python -m <package>` is the same as the console script."""

from .cli import main

raise SystemExit(main())
