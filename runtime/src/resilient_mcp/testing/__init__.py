"""What a project's tests and dev sessions use: its server built in memory (`server`), its command
started as a host would (`stdio`), a real PostgreSQL per session with a schema per test
(`postgres`, a pytest plugin), and a local PostgreSQL kept between runs (`local_postgres`,
`nox -s db`)."""
