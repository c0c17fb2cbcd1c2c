#!/bin/sh
# What the official image's entrypoint does on first start, in short: a cluster owned by
# POSTGRES_USER with POSTGRES_PASSWORD, the database POSTGRES_DB, password logins from anywhere.
set -eu
: "${POSTGRES_PASSWORD:?the official image refuses to start without POSTGRES_PASSWORD}"
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
install -d -o postgres -g postgres -m 0700 "$PGDATA"
install -d -o postgres -g postgres /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    # UTF-8, as the official image makes it (its LANG is en_US.utf8).
    runuser -u postgres -- initdb --username="$user" --pwfile=/tmp/pwfile --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust -D "$PGDATA" >/dev/null
    rm /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    runuser -u postgres -- pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$database" != postgres ]; then
        runuser -u postgres -- psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres \
            -c "CREATE DATABASE \"$database\"" >/dev/null
    fi
    runuser -u postgres -- pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- "$@" -c listen_addresses='*'
