-- The vector index of each embedding size is built again with m 12 and ef_construction 128 (instead
-- of pgvector's defaults, m 16 and ef_construction 64), the parameters src/store/knowledge/vector-index.ts
-- builds new ones with: a graph built with the longer candidate list and fewer neighbours per node
-- is searched with ef_search 40 instead of 100 for the same recall@10 (≥ 0.963 in each of 5 builds of
-- the clustered 100 000-chunk corpus, against ≥ 0.955 before), and each step of its walk reads fewer
-- neighbours: a hybrid search costs PostgreSQL ~20 % less CPU (bench/README.md, "Knowledge at scale").
-- Same expression, operator class and name (chunks_hnsw_<dims>_idx); one built so already is left alone.
do $$
declare
  ix record;
  n integer;
begin
  for ix in
    select i.indexname from pg_indexes i join pg_class c on c.relname = i.indexname and c.relnamespace = (select oid from pg_namespace where nspname = current_schema())
    where i.schemaname = current_schema() and i.tablename = 'chunks' and i.indexname ~ '^chunks_hnsw_[0-9]+_idx$'
      and not coalesce(c.reloptions @> array['m=12', 'ef_construction=128'], false)
  loop
    n := substring(ix.indexname from '^chunks_hnsw_([0-9]+)_idx$')::integer;
    execute format('drop index %I', ix.indexname);
    execute format('create index %I on chunks using hnsw ((l2_normalize(embedding::vector(%s))::halfvec(%s)) halfvec_cosine_ops) with (m = 12, ef_construction = 128) where dims = %s', ix.indexname, n, n, n);
  end loop;
end
$$;
