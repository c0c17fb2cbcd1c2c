"""`python -m <package>.diagnose`: the same as `<command> diagnose`."""

from resilient_mcp.commands.diagnose.command import main

raise SystemExit(main())
