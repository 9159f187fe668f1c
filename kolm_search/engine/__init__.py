"""The engine's data model: ids to codes, the run/qrels schema, candidate frames, the document
table, text and tokenizers, filters and selections, peers' shapes.

It imports nothing of the contract."""
