import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { parseCatalog } from '../../src/domain/models/catalog'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The README and docs/ are followed by newcomers word for word: every link must resolve, no file may
 * point outside the repository, every model catalogue shown must load, and every file and `bun run`
 * script named must exist. A failure names the document, the line and what to fix.
 */
const root = join(import.meta.dir, '..', '..')

/** The documents a reader follows: README.md and every Markdown file under docs/, examples/, bench/ and src/. */
const docs = [
  'README.md',
  ...['docs/**/*.md', 'examples/**/*.md', 'bench/**/*.md', 'src/**/*.md'].flatMap((g) => [...new Bun.Glob(g).scanSync({ cwd: root })]).sort(),
]

const read = (path: string) => readFileSync(join(root, path), 'utf8')

interface Line {
  doc: string
  no: number
  text: string
}

/** The lines outside fenced code blocks (links and headings inside them are examples, not links). */
function prose(doc: string): Line[] {
  const out: Line[] = []
  let fence: string | null = null
  read(doc)
    .split('\n')
    .forEach((text, i) => {
      const m = /^\s*(```+|~~~+)/.exec(text)
      if (m) {
        if (fence === null) fence = m[1]!
        else if (m[1]!.startsWith(fence)) fence = null
        return
      }
      if (fence === null) out.push({ doc, no: i + 1, text })
    })
  return out
}

/** Every line, fenced or not (for names of files and scripts, which matter most inside commands). */
function allLines(doc: string): Line[] {
  return read(doc)
    .split('\n')
    .map((text, i) => ({ doc, no: i + 1, text }))
}

/** The fenced blocks of one language, with the line they start on. */
function blocks(doc: string, lang: string): { no: number; body: string }[] {
  const out: { no: number; body: string }[] = []
  const lines = read(doc).split('\n')
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '```' + lang) continue
    const start = i
    const body: string[] = []
    while (++i < lines.length && lines[i]!.trim() !== '```') body.push(lines[i]!)
    out.push({ no: start + 1, body: body.join('\n') })
  }
  return out
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(doc: string): Set<string> {
  const seen = new Map<string, number>()
  const anchors = new Set<string>()
  for (const { text } of prose(doc)) {
    for (const m of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!)
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(text)
    if (!h) continue
    const slug = h[1]!
      .replace(/<[^>]+>/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-')
    const n = seen.get(slug) ?? 0
    seen.set(slug, n + 1)
    anchors.add(n === 0 ? slug : `${slug}-${n}`)
  }
  return anchors
}

/** Markdown links and images, inline (`[x](t)`, `![x](t)`) and by reference (`[x]: t`), outside code spans. */
function linksOf(doc: string): (Line & { target: string })[] {
  const out: (Line & { target: string })[] = []
  for (const line of prose(doc)) {
    const text = line.text.replace(/`[^`]*`/g, '')
    for (const m of text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ ...line, target: m[1]! })
    const ref = /^\s*\[[^\]]+\]:\s*(\S+)/.exec(text)
    if (ref) out.push({ ...line, target: ref[1]! })
    for (const m of text.matchAll(/<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"/g)) out.push({ ...line, target: m[1]! })
  }
  return out
}

/** Written by a run, not committed (bench/README.md says so): named in the docs, absent from a clone. */
const GENERATED = ['bench/results']

const where = (l: Line) => `${l.doc}:${l.no}`
const isExternal = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target)
const exists = (path: string) => existsSync(join(root, path))

describe('links and anchors resolve inside the repository', () => {
  test('there are documents and links to check', () => {
    expect(docs.length).toBeGreaterThan(5)
    expect(docs.flatMap(linksOf).length).toBeGreaterThan(10)
  })

  for (const doc of docs) {
    test(doc, () => {
      const broken: string[] = []
      for (const link of linksOf(doc)) {
        if (isExternal(link.target)) continue
        const [pathPart, anchor] = link.target.split('#', 2) as [string, string | undefined]
        const path = pathPart === '' ? doc : normalize(pathPart.startsWith('/') ? pathPart.slice(1) : join(dirname(doc), decodeURI(pathPart)))
        if (path.startsWith('..')) {
          broken.push(`${where(link)}: ${link.target} is outside the repository`)
          continue
        }
        if (!exists(path)) {
          broken.push(`${where(link)}: ${link.target}: no file ${path}`)
          continue
        }
        if (anchor !== undefined && path.endsWith('.md') && statSync(join(root, path)).isFile() && !anchorsOf(path).has(anchor)) {
          broken.push(`${where(link)}: ${link.target}: ${path} has no heading with anchor #${anchor}`)
        }
      }
      expect(broken).toEqual([])
    })
  }

  test('a path written as code (`docs/x.md`, `src/...`) names a file or folder that exists', () => {
    const broken: string[] = []
    for (const doc of docs) {
      for (const line of prose(doc)) {
        for (const m of line.text.matchAll(/`((?:docs|src|tests|bench|examples|scripts)\/[^`\s*{}<>]*)`/g)) {
          const path = m[1]!.replace(/[#:].*$/, '')
          if (path.includes('...') || path.includes('NNNNN') || GENERATED.some((g) => path.startsWith(g))) continue
          if (!exists(path)) broken.push(`${where(line)}: \`${m[1]}\` does not exist`)
        }
      }
    }
    expect(broken).toEqual([])
  })
})

describe('no document points outside the repository', () => {
  // Documents only the project's authors had (the published interface, the binding contract) are not
  // in this repository: the docs say what they decided in their own words, or link a section of docs/.
  const outside: [RegExp, string][] = [
    [/\.\.\/shared/, '../shared'],
    [/(^|[^\w/.-])spec\//, 'a spec/ path'],
    [/api\/CONTRACT\.md/, 'api/CONTRACT.md'],
    [/\bCONTRACT\b/, 'the CONTRACT'],
    [/\b(the|our) spec\b|\bspec'?s?\s+(section\s+)?\d|\bspec(ification)? sections?\b/i, '"the spec" / "spec 4.x"'],
  ]
  // The code's comments too. Not the SQL migrations: a landed migration is never edited (its text is
  // what every database already ran), so the first six keep their old headers.
  const code = ['src', 'tests', 'scripts', 'bench'].flatMap((dir) => [...new Bun.Glob(`${dir}/**/*.ts`).scanSync({ cwd: root })])
    .filter((f) => f !== 'tests/unit/docs.test.ts')
  const files = [...docs, ...new Bun.Glob('examples/**/*.ts').scanSync({ cwd: root }), ...code]

  for (const file of files) {
    test(file, () => {
      const found: string[] = []
      for (const line of allLines(file)) {
        for (const [re, what] of outside) if (re.test(line.text)) found.push(`${where(line)}: names ${what}: ${line.text.trim().slice(0, 120)}`)
      }
      expect(found).toEqual([])
    })
  }
})

describe('every model catalogue shown in the docs loads', () => {
  const shown = ['README.md', 'docs/models.md'].flatMap((doc) => blocks(doc, 'json').map((b) => ({ doc, ...b })))
  const catalogues = shown.filter(({ body }) => {
    try {
      const raw = JSON.parse(body) as Record<string, unknown>
      return typeof raw === 'object' && raw !== null && ('providers' in raw || 'models' in raw)
    } catch {
      return /"(providers|models)"\s*:/.test(body)
    }
  })

  test('docs/models.md shows at least one catalogue', () => {
    expect(catalogues.filter((c) => c.doc === 'docs/models.md').length).toBeGreaterThan(0)
  })

  for (const c of catalogues) {
    test(`${c.doc}:${c.no}`, () => {
      // The keys named by api_key_env are set, as the docs tell the reader to do.
      const env = new Proxy({} as Record<string, string>, { get: (_t, name) => (typeof name === 'string' ? `set-${name}` : undefined) })
      let error: string | null = null
      try {
        parseCatalog(JSON.parse(c.body), env)
      } catch (err) {
        error = (err as Error).message
      }
      expect(error).toBeNull()
    })
  }
})

describe('every file and script the docs tell the reader to use exists', () => {
  const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> }

  test('examples/..., curl -F file=@..., bun <file>', () => {
    const missing: string[] = []
    for (const doc of docs) {
      for (const line of allLines(doc)) {
        for (const m of line.text.matchAll(/(?:^|[\s`(=@'"])(examples\/[\w./-]*\w)/g)) if (!exists(m[1]!)) missing.push(`${where(line)}: ${m[1]}`)
        for (const m of line.text.matchAll(/-F\s+'?\w+=@([^\s;'"]+)/g)) if (!exists(m[1]!)) missing.push(`${where(line)}: @${m[1]} (a file the reader has no copy of)`)
        for (const m of line.text.matchAll(/\bbun (?:run )?([\w./-]+\.(?:ts|js))\b/g)) if (!exists(m[1]!)) missing.push(`${where(line)}: bun ${m[1]}`)
      }
    }
    expect(missing).toEqual([])
  })

  test('bun run <script> and bun start / bun test name scripts of package.json', () => {
    const missing: string[] = []
    for (const doc of docs) {
      for (const line of allLines(doc)) {
        for (const m of line.text.matchAll(/\bbun run ([\w:./-]*[\w])/g)) {
          const name = m[1]!
          if (name.includes('/') || /\.(ts|js)$/.test(name) ? !exists(name) : !Object.hasOwn(pkg.scripts, name)) missing.push(`${where(line)}: bun run ${name}`)
        }
        for (const m of line.text.matchAll(/\bbun (start|test)\b/g)) if (!Object.hasOwn(pkg.scripts, m[1]!)) missing.push(`${where(line)}: bun ${m[1]}`)
      }
    }
    expect(missing).toEqual([])
  })
})

test('the README links every document of docs/ a newcomer needs to find', () => {
  const readme = read('README.md')
  const linked = new Set(linksOf('README.md').map((l) => normalize(l.target.split('#')[0]!)))
  const missing = ['docs/architecture.md', 'docs/api.md'].filter((d) => !linked.has(d) && !readme.includes(`\`${d}\``))
  expect(missing.map((d) => relative(root, join(root, d)))).toEqual([])
})
