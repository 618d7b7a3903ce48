"""`lambo serve-web`: a read-only web window on one session (view, API, page)."""
