/**
 * Makes the migrated PGlite template a fresh embedded data directory starts from (src/store/pglite-template.ts).
 * Run by `bun install` (postinstall) and safe to run again; it never fails the install: without a
 * template the first start initialises the database itself, only slower.
 */
import { existsSync } from 'node:fs'
import { makeTemplate, templateDir } from '../src/store/pglite-template'

const dir = templateDir()
try {
  if (!existsSync(dir)) {
    const started = performance.now()
    await makeTemplate(dir)
    console.log(`pglite template: ${dir} (${Math.round(performance.now() - started)} ms)`)
  }
} catch (err) {
  console.warn(`pglite template not made (the first start will initialise the database itself): ${(err as Error).message}`)
}
