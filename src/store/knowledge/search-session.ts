/**
 * The settings a search runs under. Sequential scans and sorts are priced out: every list has an
 * index path, and the sorts that remain (ranking, the exact path's distance order, the merge) have
 * no alternative, so they stay. Without that, a base without statistics (PGlite never analyzes) was
 * answered with a scan of every chunk and a sort. The sorts' penalty makes the plan look expensive
 * enough for PostgreSQL's JIT compiler, which then spent a second compiling a statement that runs in
 * a millisecond: JIT is off. The plan is the prepared statement's generic one from the first
 * execution on (planning it took ~1.5 ms of a ~3 ms search at 100 000 chunks): every choice that
 * depends on the base's size is made at run time by the gates, not by the planner.
 *
 * In server mode these are the search pool's session settings, sent when each of its connections
 * starts (`Database.search`), so a search is one statement and one round trip; `hnsw.ef_search` is
 * set per search only when its list is longer than half the deployment's `ef` (`Database.efSearch`).
 * On the embedded database (one session shared with everything else) each search sets them for its
 * own transaction.
 */
export const searchSession = (ef: number): Record<string, string> => ({
  'hnsw.ef_search': String(ef),
  'hnsw.iterative_scan': 'relaxed_order',
  enable_seqscan: 'off',
  enable_sort: 'off',
  jit: 'off',
  plan_cache_mode: 'force_generic_plan',
})

/** The candidate list for a search of `limit` rows: at least `base` (the deployment's), and never less than twice the rows asked. */
export const efSearchFor = (base: number, limit: number) => Math.min(1000, Math.max(base, limit * 2))
