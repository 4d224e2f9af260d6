/**
 * Slots shared fairly between keys (workspaces): at most `slots` pieces of work at once, and no key
 * more than its share while several keys have work (`slots` divided by the keys with pieces in flight
 * or waiting, or present, at least one each). A key is present between `enter` and `leave` (a run
 * being driven, between its steps): its share is kept free for it then, so a step of a workspace with
 * one run does not arrive to find every slot taken by another's. Which waiting piece goes next is
 * start-time fair queuing, every piece counted alike: a piece is tagged, when it arrives, with the
 * later of the gate's virtual time (the tag of the last piece let in) and the tag after its key's
 * previous piece, and the smallest tag goes first (the earliest to arrive among equals). A key that queues a thousand pieces tags them one
 * after another, so a key with one piece arriving later is tagged before all but the first of them:
 * it waits for the pieces in flight, not for the thousand (docs/workflows.md, "Fair shares between
 * workspaces").
 *
 * The `null` key is the owner's own housekeeping (a worker's claim): queued like a key but not
 * counted among the keys sharing the slots.
 *
 * Pieces must not wait on other pieces of the same gate while holding a slot: with one slot that
 * would never end.
 */
export class FairGate {
  private busy = 0
  /** Pieces in flight by key. */
  private readonly running = new Map<string | null, number>()
  /** Pieces waiting by key, each queue in arrival order (so in tag order). */
  private readonly waiting = new Map<string | null, Waiting[]>()
  /** The tag after each key's last piece, while the key has pieces waiting or in flight. */
  private readonly next = new Map<string | null, number>()
  /** Keys present (entered and not yet left), with how many times. */
  private readonly present = new Map<string, number>()
  /** The tag of the last piece let in. */
  private virtual = 0
  private arrivals = 0

  constructor(readonly slots: number) {
    if (!Number.isInteger(slots) || slots < 1) throw new Error(`a gate needs at least one slot, not ${slots}`)
  }

  /** Pieces waiting for a slot now, every key together. */
  get queued(): number {
    let n = 0
    for (const q of this.waiting.values()) n += q.length
    return n
  }

  /** `key` has work coming (between pieces too) until `leave`: counted among the keys sharing the slots. */
  enter(key: string): void {
    this.present.set(key, (this.present.get(key) ?? 0) + 1)
  }

  leave(key: string): void {
    const n = (this.present.get(key) ?? 0) - 1
    if (n > 0) this.present.set(key, n)
    else {
      this.present.delete(key)
      // One key fewer: the others' shares may have grown.
      this.admit()
    }
  }

  /** Runs `work` once a slot is free and it is `key`'s turn; the slot is given back however it ends. */
  async run<T>(key: string | null, work: () => Promise<T>): Promise<T> {
    const tag = Math.max(this.virtual, this.next.get(key) ?? 0)
    this.next.set(key, tag + 1)
    await new Promise<void>((resolve) => {
      const piece = { tag, arrival: this.arrivals++, resolve }
      const q = this.waiting.get(key)
      if (q) q.push(piece)
      else this.waiting.set(key, [piece])
      this.admit()
    })
    try {
      return await work()
    } finally {
      this.busy--
      const n = this.running.get(key)! - 1
      if (n === 0) this.running.delete(key)
      else this.running.set(key, n)
      // A key with nothing left owes nothing: its next piece is tagged like a new key's (the map
      // holds only the keys with work, however many workspaces a process serves).
      if (n === 0 && !this.waiting.has(key)) this.next.delete(key)
      this.admit()
    }
  }

  /** What one key may have in flight while `keys` keys (housekeeping not counted) have work: its part of the slots, at least one. */
  private share(keys: number): number {
    return Math.max(1, Math.floor(this.slots / Math.max(1, keys)))
  }

  /** The keys with pieces waiting or in flight, or present, housekeeping not counted. */
  private keysWithWork(): number {
    let n = this.present.size
    for (const key of this.running.keys()) if (key !== null && !this.present.has(key)) n++
    for (const key of this.waiting.keys()) if (key !== null && !this.present.has(key) && !this.running.has(key)) n++
    return n
  }

  private take(key: string | null, tag: number) {
    this.busy++
    this.running.set(key, (this.running.get(key) ?? 0) + 1)
    this.virtual = Math.max(this.virtual, tag)
  }

  /** Slots are free: the waiting piece with the smallest tag among keys under their share goes, until none is left or the slots are full. */
  private admit() {
    while (this.busy < this.slots) {
      const share = this.share(this.keysWithWork())
      let best: { key: string | null; piece: Waiting } | null = null
      for (const [key, q] of this.waiting) {
        const head = q[0]!
        if (key !== null && (this.running.get(key) ?? 0) >= share) continue
        if (!best || head.tag < best.piece.tag || (head.tag === best.piece.tag && head.arrival < best.piece.arrival)) best = { key, piece: head }
      }
      if (!best) return
      const q = this.waiting.get(best.key)!
      q.shift()
      if (q.length === 0) this.waiting.delete(best.key)
      this.take(best.key, best.piece.tag)
      best.piece.resolve()
    }
  }
}

interface Waiting {
  tag: number
  arrival: number
  resolve: () => void
}
