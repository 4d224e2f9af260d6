import { setDefaultTimeout } from 'bun:test'

// Each test file builds its own database; PGlite's first start (initdb) can take several seconds on
// two shared cores. bunfig's [test] timeout is not honoured by this Bun, so it is set here.
setDefaultTimeout(30_000)
