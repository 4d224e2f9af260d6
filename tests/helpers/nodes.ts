import { NodeError, type Variables } from '../../src/domain/workflows/types'

/** The variables executors see in tests/integration/workflow-*.test.ts unless a test passes its own. */
export const vars: Variables = {
  inputs: { name: 'Ada', score: 0.7, items: [1, 2, 3] },
  nodes: { search: { output: { results: [{ content: 'first', score: 0.9 }], total: 1 } } },
}

/** The NodeError an execution fails with (Bun: no `expect(promise).rejects`). */
export async function failure(p: Promise<unknown>): Promise<NodeError> {
  try {
    await p
  } catch (err) {
    if (err instanceof NodeError) return err
    throw err
  }
  throw new Error('expected the node to fail')
}
