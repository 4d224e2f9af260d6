/**
 * `bun run diagrams`: writes docs/machines/<name>.md for every machine of src/machines/registry.ts
 * and docs/machines/README.md, and removes pages of machines that are gone.
 * `bun run diagrams --check`: writes nothing; exits 1 listing the files that are stale.
 */
import { mkdir, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { MACHINE_DOCS_DIR, machineDocFiles } from '../src/machines/docs'
import { machines } from '../src/machines/registry'

const root = join(import.meta.dir, '..')
const check = process.argv.includes('--check')

const files = machineDocFiles(machines)
const wanted = new Set(files.map((f) => f.path))
const existing = (await readdir(join(root, MACHINE_DOCS_DIR)).catch(() => [] as string[]))
  .filter((name) => name.endsWith('.md'))
  .map((name) => `${MACHINE_DOCS_DIR}/${name}`)

const stale: string[] = []
for (const f of files) {
  const on = Bun.file(join(root, f.path))
  if (!(await on.exists()) || (await on.text()) !== f.content) stale.push(f.path)
}
const orphans = existing.filter((p) => !wanted.has(p)).sort()

if (check) {
  if (stale.length || orphans.length) {
    for (const p of stale) console.error(`stale: ${p}`)
    for (const p of orphans) console.error(`no longer generated: ${p}`)
    console.error('run bun run diagrams')
    process.exit(1)
  }
  console.log(`${files.length} files in ${MACHINE_DOCS_DIR} are up to date`)
} else {
  await mkdir(join(root, MACHINE_DOCS_DIR), { recursive: true })
  for (const f of files) if (stale.includes(f.path)) await Bun.write(join(root, f.path), f.content)
  for (const p of orphans) await rm(join(root, p))
  for (const p of stale) console.log(`wrote ${p}`)
  for (const p of orphans) console.log(`removed ${p}`)
  if (!stale.length && !orphans.length) console.log(`${files.length} files in ${MACHINE_DOCS_DIR} are up to date`)
}
