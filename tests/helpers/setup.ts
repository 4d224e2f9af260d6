import { setDefaultTimeout } from 'bun:test'
import { TEST_TIMEOUT_MS } from './timeouts'

// Reaches only the first file of a run (Bun keeps the default per file): every test file sets it
// again at its top (tests/helpers/timeouts.ts).
setDefaultTimeout(TEST_TIMEOUT_MS)

// The whole suite runs in this one process. On a machine with plenty of memory the collector lets
// garbage pile up (each file's embedded database is a WebAssembly memory of its own, freed only when
// collected): 2.5 GB resident by the last files. A full collection whenever the process has grown
// past 1 GB (or half a GB past what the last one left) keeps it lower; one every 10 s did too, but
// cost the suite ~40 s of pauses (bench/README.md, "The test suite"). Looked at twice a second (the
// look is one system call): a test allocating fast grew the process by 1.2 GB in 4 s. A test that
// loops for seconds without yielding keeps this from running, so such loops yield now and then.
const GB = 1024 * 1024 * 1024
let collectAbove = GB
setInterval(() => {
  if (process.memoryUsage.rss() <= collectAbove) return
  Bun.gc(true)
  collectAbove = Math.max(GB, process.memoryUsage.rss() + GB / 2)
}, 500).unref()
