"""Durable tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663) on the store's tasks table.

`extension` is what the SDK sees (the advertised extension, `tools/call` turned into a task,
`tasks/get`, `tasks/update`, `tasks/cancel`); `runner` runs a task's body in the background,
on whichever process owns it, and takes over the tasks of processes that died; `task_context`
is the `Context` a body gets there; `wire` is the extension's JSON.
"""
