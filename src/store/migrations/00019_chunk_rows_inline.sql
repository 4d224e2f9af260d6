-- A chunk's row is ~2.8 kB at 384 dimensions (a 1.5 kB vector kept in the row, the text, its
-- tsvector). Past 2 kB PostgreSQL compresses the text and the tsvector and moves them to the TOAST
-- table, so every full-text candidate ranked (`ts_rank` reads the tsvector) and every hit answered
-- (its text) cost a TOAST index lookup and a decompression: ~4 buffer reads a row, ~0.5 ms of a
-- ~2 ms hybrid search at 100 000 chunks. With a target of a whole page, a row is left as it is
-- when it fits a page; only rows that do not (chunks of thousands of tokens, vectors of thousands
-- of dimensions) are compressed and moved out as before. Rows written from now on.
alter table chunks set (toast_tuple_target = 8160);
alter table chunks_unindexed set (toast_tuple_target = 8160);

-- Every full-text search reads the whole pending list of the tsvector index (rows inserted since its
-- last merge), once per query form: at the 256 kB limit, ~0.4 ms of a search. Merged every 64 kB
-- instead (about a hundred chunks), the list a search reads stays small between merges; the merge
-- itself is batched either way.
alter index chunks_tsv_idx set (gin_pending_list_limit = 64);
