/**
 * Every test file's default limit for a test or a hook, set at the top of each file with
 * `setDefaultTimeout(TEST_TIMEOUT_MS)`. Bun keeps `setDefaultTimeout` per file and resets it after
 * each one: called in the preload (tests/helpers/setup.ts) it reached only the first file of a run,
 * and every later file fell back to Bun's 5 s, which a test starting a database or a subprocess
 * passes on a busy two-core machine. bunfig.toml has no key for it, and `bun test --timeout` is not
 * the command the README gives. tests/unit/test-timeouts.test.ts checks that no file goes without.
 */
export const TEST_TIMEOUT_MS = 60_000
