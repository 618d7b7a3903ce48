"""The ``Store`` protocol on PostgreSQL (and CockroachDB, through its dialect).

``store.py`` is the store, ``connection.py`` its pool and fenced write
transactions, ``schema.py`` the numbered migrations, ``keywords.py`` the
tsvector keyword leg, ``dsn.py`` what may be said about a DSN (never its
password). Only ``dsn.py`` can be imported without psycopg installed.
"""
