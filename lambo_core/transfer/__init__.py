"""Memory in and out: the JSONL line format (``lines``), the official memory server's
``memory.jsonl`` mapped onto it (``server_memory``), the exporter (``export``), the resume
checkpoint (``checkpoint``) and the import driver (``driver``). docs/import-export.md."""
