import { setDefaultTimeout } from 'bun:test'
import { TEST_TIMEOUT_MS } from './timeouts'

// Reaches only the first file of a run (Bun keeps the default per file): every test file sets it
// again at its top (tests/helpers/timeouts.ts).
setDefaultTimeout(TEST_TIMEOUT_MS)
