/**
 * A counter every write that can change what `accessAndBudget` (store/credits.ts) answers bumps
 * before it is sent: a workspace's row, its members, its budget, its period's spend. The embedded
 * database has one connection that answers in order, so a read sent when the counter had a value
 * saw every write bumped before it: its answer stays good while the counter has not moved
 * (domain/access-cache.ts). In server mode, where other processes write too, nothing is cached.
 */
let generation = 0

export function accessChanged(): void {
  generation++
}

export function accessGeneration(): number {
  return generation
}
