-- The vector index of each embedding size holds its vectors as halfvec (16-bit floats) instead of
-- vector (32-bit): half the graph (at 384 dimensions and 100 000 chunks 112 MB instead of 195 MB,
-- which no longer outgrows PostgreSQL's default 128 MB of shared buffers beside the table). Each
-- vector is normalised to length 1 first (l2_normalize: the cosine distance is the same): halfvec
-- holds at most ±65 504 and only ~3 significant digits, so a model's unnormalised vectors could
-- fail the cast (a chunk that could never be indexed) or lose their small components. The chunks
-- keep their full vectors: the walk finds the candidates, the distance answered and the order of
-- the results are computed from the stored vector (src/store/knowledge/search.ts). Recall@10 measured in bench/README.md ("Knowledge at
-- scale"). Each index keeps its name (chunks_hnsw_<dims>_idx); one built on vector is built again.
do $$
declare
  ix record;
  n integer;
begin
  for ix in
    select indexname from pg_indexes
    where schemaname = current_schema() and tablename = 'chunks' and indexname ~ '^chunks_hnsw_[0-9]+_idx$' and indexdef !~ 'halfvec'
  loop
    n := substring(ix.indexname from '^chunks_hnsw_([0-9]+)_idx$')::integer;
    execute format('drop index %I', ix.indexname);
    execute format('create index %I on chunks using hnsw ((l2_normalize(embedding::vector(%s))::halfvec(%s)) halfvec_cosine_ops) with (m = 16, ef_construction = 64) where dims = %s', ix.indexname, n, n, n);
  end loop;
end
$$;
