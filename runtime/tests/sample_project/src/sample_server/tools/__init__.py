"""Your tools. Every module in this package is imported at start-up, and each
function decorated with `@tool` in it becomes an MCP tool: adding a file adds tools.

Owner-owned: `copier update` never touches this package.
"""
