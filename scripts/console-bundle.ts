/**
 * Bundles the management console's script ahead of time (the container image does, at build time):
 * `bun run build:console dist/console.js`, then start the service with CONSOLE_BUNDLE=dist/console.js
 * and it serves that file instead of bundling src/console at start (docs/deployment.md).
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { buildConsole } from '../src/routes/console'

const out = resolve(process.argv[2] ?? 'dist/console.js')
const started = performance.now()
const text = await buildConsole()
mkdirSync(dirname(out), { recursive: true })
writeFileSync(out, text)
console.log(`console bundle: ${out} (${Math.round(text.length / 1024)} KiB, ${Math.round(performance.now() - started)} ms)`)
