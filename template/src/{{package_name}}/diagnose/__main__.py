# Template-owned: `copier update` replaces this file; put your code in tools/.
"""`python -m <package>.diagnose`: the same as `<command> diagnose`."""

from .command import main

raise SystemExit(main())
