/**
 * The shape rules of `src/` (server code; the console is its own program), docs/architecture.md
 * "Layers": no import circle between files, no import against the layer order, no file over
 * MAX_FILE_LINES lines and no function over MAX_FUNCTION_LINES. `bun run layers` prints what breaks
 * them; `tests/unit/layers.test.ts` holds the code to them. Type-only imports count: a type still
 * ties one file's meaning to another's.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import * as ts from 'typescript'
import { dirname, join, relative, resolve } from 'node:path'

const ROOT = resolve(import.meta.dir, '..')
const SRC = join(ROOT, 'src')

/** `src/`-relative path of every server TypeScript file, the console excluded. */
export function sourceFiles(dir = SRC): string[] {
  const out: string[] = []
  for (const name of readdirSync(dir)) {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) {
      if (relative(SRC, path) !== 'console') out.push(...sourceFiles(path))
    } else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(relative(SRC, path))
  }
  return out.sort()
}

const SPECIFIER = /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^import\s*['"]([^'"]+)['"]/gm

/** The files of `src/` a file imports (relative specifiers only), statically or dynamically. */
export function importsOf(file: string, files: Set<string>): string[] {
  const text = readFileSync(join(SRC, file), 'utf8')
  const out = new Set<string>()
  for (const m of text.matchAll(SPECIFIER)) {
    const spec = m[1] ?? m[2] ?? m[3]
    if (!spec?.startsWith('.')) continue
    const base = relative(SRC, resolve(SRC, dirname(file), spec)).replace(/\.(ts|js)$/, '')
    const target = [`${base}.ts`, `${base}/index.ts`].find((f) => files.has(f))
    if (target && target !== file) out.add(target)
  }
  return [...out].sort()
}

export type Graph = Map<string, string[]>

export function importGraph(): Graph {
  const files = sourceFiles()
  const set = new Set(files)
  return new Map(files.map((f) => [f, importsOf(f, set)]))
}

/** Strongly connected components of more than one file (Tarjan): each is an import circle. */
export function circles(graph: Graph): string[][] {
  let index = 0
  const indexOf = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const out: string[][] = []
  const visit = (v: string): void => {
    indexOf.set(v, index)
    low.set(v, index++)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!indexOf.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indexOf.get(w)!))
    }
    if (low.get(v) === indexOf.get(v)) {
      const scc: string[] = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        scc.push(w)
      } while (w !== v)
      if (scc.length > 1) out.push(scc.sort())
    }
  }
  for (const v of graph.keys()) if (!indexOf.has(v)) visit(v)
  return out.sort((a, b) => a[0]!.localeCompare(b[0]!))
}

/** The layer a file belongs to: its first folder under `src/`, or the file itself at the top. */
export function layerOf(file: string): string {
  const slash = file.indexOf('/')
  return slash < 0 ? file.replace(/\.ts$/, '') : file.slice(0, slash)
}

/**
 * Which layers each layer may import. Start-up (`main`, `boot`, `app`) wires everything and is
 * imported by nothing but itself and tests; `deps` is the shape of what start-up hands down.
 */
export const MAY_IMPORT: Record<string, string[]> = {
  lib: ['lib'],
  env: [],
  config: ['lib', 'env'],
  machines: ['machines', 'lib'],
  store: ['store', 'lib', 'config', 'machines'],
  deps: ['config', 'lib', 'store', 'domain'],
  domain: ['domain', 'lib', 'config', 'machines', 'store', 'deps'],
  routes: ['routes', 'domain', 'lib', 'config', 'machines', 'store', 'deps'],
  workers: ['workers', 'domain', 'lib', 'config', 'machines', 'store', 'deps'],
  app: ['routes', 'domain', 'lib', 'config', 'store', 'deps'],
  boot: ['domain', 'lib', 'config', 'store', 'deps', 'workers'],
  main: ['app', 'boot', 'domain', 'lib', 'config', 'store', 'deps', 'workers', 'machines'],
}

export interface Breach {
  from: string
  to: string
  rule: string
}

/** Imports that break a layer rule, and domain or route files that reach a worker through anything. */
export function layerBreaches(graph: Graph): Breach[] {
  const out: Breach[] = []
  for (const [from, tos] of graph) {
    const allowed = MAY_IMPORT[layerOf(from)]
    for (const to of tos) {
      if (allowed && !allowed.includes(layerOf(to))) {
        out.push({ from, to, rule: `${layerOf(from)} may not import ${layerOf(to)}` })
      }
    }
  }
  for (const from of graph.keys()) {
    if (!['domain', 'routes', 'deps', 'store'].includes(layerOf(from))) continue
    const path = reach(graph, from, (f) => layerOf(f) === 'workers')
    if (path && path.length > 2) out.push({ from, to: path.slice(1).join(' → '), rule: `${layerOf(from)} reaches a worker` })
  }
  return out
}

/** The shortest import path from `start` to a file `hit` accepts, or null. */
function reach(graph: Graph, start: string, hit: (f: string) => boolean): string[] | null {
  const prev = new Map<string, string>([[start, '']])
  const queue = [start]
  while (queue.length) {
    const v = queue.shift()!
    for (const w of graph.get(v) ?? []) {
      if (prev.has(w)) continue
      prev.set(w, v)
      if (hit(w)) {
        const path = [w]
        for (let p = v; p; p = prev.get(p)!) path.unshift(p)
        return path
      }
      queue.push(w)
    }
  }
  return null
}

export const MAX_FILE_LINES = 400
export const MAX_FUNCTION_LINES = 80

/** Files over MAX_FILE_LINES lines, with their length. */
export function longFiles(files = sourceFiles()): { file: string; lines: number }[] {
  return files
    .map((file) => ({ file, lines: readFileSync(join(SRC, file), 'utf8').split('\n').length - 1 }))
    .filter((f) => f.lines > MAX_FILE_LINES)
}

/** Functions (declarations, methods, arrows, function expressions) over MAX_FUNCTION_LINES lines. */
export function longFunctions(files = sourceFiles()): { at: string; name: string; lines: number }[] {
  const out: { at: string; name: string; lines: number }[] = []
  for (const file of files) {
    const source = ts.createSourceFile(file, readFileSync(join(SRC, file), 'utf8'), ts.ScriptTarget.Latest, true)
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const from = source.getLineAndCharacterOfPosition(node.getStart()).line
        const lines = source.getLineAndCharacterOfPosition(node.getEnd()).line - from + 1
        const name = 'name' in node && node.name ? node.name.getText(source) : '(anonymous)'
        if (lines > MAX_FUNCTION_LINES) out.push({ at: `${file}:${from + 1}`, name, lines })
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  return out
}

if (import.meta.main) {
  const graph = importGraph()
  const found = circles(graph)
  const breaches = layerBreaches(graph)
  console.log(`${graph.size} files, ${[...graph.values()].reduce((n, t) => n + t.length, 0)} imports`)
  console.log(`\nimport circles: ${found.length}`)
  for (const c of found) console.log(`  ${c.join(' ⇄ ')}`)
  console.log(`\nlayer breaches: ${breaches.length}`)
  for (const b of breaches) console.log(`  ${b.from} → ${b.to}  (${b.rule})`)
  const files = longFiles()
  console.log(`\nfiles over ${MAX_FILE_LINES} lines: ${files.length}`)
  for (const f of files) console.log(`  ${f.file} ${f.lines}`)
  const functions = longFunctions()
  console.log(`\nfunctions over ${MAX_FUNCTION_LINES} lines: ${functions.length}`)
  for (const f of functions) console.log(`  ${f.at} ${f.name} ${f.lines}`)
  process.exitCode = found.length || breaches.length || files.length || functions.length ? 1 : 0
}
