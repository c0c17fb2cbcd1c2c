"""The exit codes of `diagnose` (documented in its --help)."""

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2
EXIT_NO_HANDSHAKE = 3
EXIT_TIMEOUT = 4
EXIT_STDOUT_NOISE = 5
EXIT_SERVER_FATAL = 78  # the server's own start-up FatalError code, passed through
