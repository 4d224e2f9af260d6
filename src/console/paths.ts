/**
 * Where an actor is in its machine, from what the public API shows of it, and the machine's Mermaid
 * text with that marked. Pure functions (no DOM): tests/unit/console-paths.test.ts runs them.
 */
export interface Highlight {
  /** The actor's current state. */
  current: string
  /** The states it went through before, oldest first (may repeat). */
  path: string[]
}

/** The Mermaid id of a state (src/machines/describe.ts: the path joined by `_`). */
export const stateId = (name: string) => name.replaceAll('.', '_').replace(/[^A-Za-z0-9_]/g, '_')

/** The machine's own diagram, with the current state and the visited ones styled by appended classes. */
export function highlighted(text: string, hl: Highlight): string {
  const visited = [...new Set(hl.path.filter((s) => s !== hl.current))].map(stateId)
  const lines = [text.trimEnd(), '  classDef visited fill:#dbeafe,stroke:#1d4ed8,stroke-width:2px', '  classDef current fill:#fde68a,stroke:#b45309,stroke-width:4px,font-weight:bold']
  if (visited.length) lines.push(`  class ${visited.join(',')} visited`)
  lines.push(`  class ${stateId(hl.current)} current`)
  return lines.join('\n') + '\n'
}

/** A run's status is its workflow-run machine state: `running`, then one final state. */
export function runPath(status: string): Highlight {
  return { current: status, path: status === 'running' ? [] : ['running'] }
}

/**
 * The webhook-delivery machine's path: every attempt was a `sending`, each but the last followed by
 * `retrying` (a redelivery goes through `pending` again, which the attempts do not tell apart from a
 * retry).
 */
export function deliveryPath(d: { status: string; attempts: unknown[] }): Highlight {
  const path = ['pending']
  d.attempts.forEach((_, i) => {
    path.push('sending')
    if (i < d.attempts.length - 1) path.push('retrying')
  })
  if (path.at(-1) === d.status) path.pop()
  return { current: d.status, path }
}

const INGESTION = ['uploading', 'parsing', 'chunking', 'embedding', 'ready']

/**
 * The document machine's path: ingestion goes uploading → parsing → chunking → embedding → ready.
 * A failed document's error code tells where it stopped (parse errors in parsing, model and credit
 * errors in embedding).
 */
export function documentPath(d: { status: string; error: { code: string } | null }): Highlight {
  if (d.status !== 'failed') return { current: d.status, path: INGESTION.slice(0, Math.max(0, INGESTION.indexOf(d.status))) }
  const code = d.error?.code ?? ''
  const stage = /upload|storage/.test(code) ? 'uploading' : /embed|index|model|credit|upstream|budget/.test(code) ? 'embedding' : /chunk/.test(code) ? 'chunking' : 'parsing'
  return { current: 'failed', path: INGESTION.slice(0, INGESTION.indexOf(stage) + 1) }
}
