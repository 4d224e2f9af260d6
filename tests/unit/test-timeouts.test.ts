import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { Glob } from 'bun'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

setDefaultTimeout(TEST_TIMEOUT_MS)

const root = join(import.meta.dir, '..', '..')

describe('every test file sets its own default limit', () => {
  // Bun resets setDefaultTimeout after each file, so the preload's call reaches only the first file
  // of a run; a file without its own call falls back to 5 s, too short on a busy two-core machine.
  const files = [...new Glob('tests/**/*.test.ts').scanSync(root)].sort()

  test('there are test files to check', () => {
    expect(files.length).toBeGreaterThan(100)
  })

  test.each(files)('%s calls setDefaultTimeout at its top level', (file) => {
    const src = readFileSync(join(root, file), 'utf8')
    expect(src).toMatch(/^setDefaultTimeout\(/m)
  })
})
