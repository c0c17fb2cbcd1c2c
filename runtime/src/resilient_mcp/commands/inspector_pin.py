"""The one MCP Inspector this project's commands and README name: `dev`, the start-up banner, the
README's commands and the template's tests all take it from here.

2.12.0: its CLI mode sends `--header "Authorization: Bearer ..."` (0.15.0, the last release without
an engines field, has no `--header`). Every release since 0.16 declares Node 22 (2.x: 22.19 or
newer); on Node 20, which reached its end of life in April 2026, it runs after npm's engine
warnings (the template's tests run it there).
"""

INSPECTOR_VERSION = "2.12.0"
INSPECTOR = f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"
INSPECTOR_NODE = "22.19"  # the Node.js version its package declares (`engines`)
