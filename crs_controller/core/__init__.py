"""Pure logic: models, parsing, hashing, ordering and decisions. No I/O here."""
