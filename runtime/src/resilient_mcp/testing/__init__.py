"""What a project's tests and dev sessions use: a local PostgreSQL (`local_postgres`)."""
