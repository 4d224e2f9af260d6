import type { Logger } from 'pino'
import { newId } from '../lib/ids'
import type { MachineDefinition } from '../machines/definition'
import { loadRow, NewerSnapshot } from '../machines/definition'
import type { Persisted } from '../machines/runner'
import type { Sql } from '../store/db'
import * as leases from '../store/leases'
import { PollingLoop } from './loop'

export interface LeasedRow<C = unknown> {
  id: string
  snapshot: Persisted<C>
  machine_version: number
}

/** The machine context a row's snapshot holds. */
type ContextOf<Row> = Row extends { snapshot: Persisted<infer C> } ? C : never

export interface LeaseOptions<C> {
  /** What the log calls this worker ("run worker"). */
  what: string
  table: leases.LeaseTable
  definition: MachineDefinition<C>
  /** A row is held this long without a heartbeat; heartbeats come every third of it. */
  leaseMs: number
  /** Rows worked on at once by this worker. */
  max: number
  /** Rows of one workspace held at once by every worker together (leases.claim). */
  perWorkspace: number
  idleMs: number
}

/**
 * The one lease loop of the machine workers (docs/architecture.md, "Workers and leases"): claim
 * rows in a claimable state whose lease is free or expired (as many as there is room for), work on
 * each until it settles or the worker loses it, heartbeat every third of the lease (a row no longer
 * held is aborted), and on stop abort the work in flight, then give every row back at once so that
 * another worker resumes it from its snapshot without waiting for the lease. A row whose snapshot
 * was written by a newer version of the service is never claimed (leases.claim) and never executed.
 */
export abstract class LeaseWorker<Row extends LeasedRow<C>, C = ContextOf<Row>> extends PollingLoop {
  readonly owner = `${process.pid}:${newId('req').slice(4, 14)}`
  protected readonly active = new Map<string, AbortController>()
  /** Rows being worked on by this worker now. */
  get busy(): number {
    return this.active.size
  }
  /** Rows held but only waiting on other rows (a parent run on its children): they take no place among `max`. */
  protected idle = 0
  private heartbeat: ReturnType<typeof setInterval> | null = null

  constructor(
    protected readonly sql: Sql,
    protected readonly lease: LeaseOptions<C>,
    log: Logger,
  ) {
    super(`${lease.what}: claiming`, lease.idleMs, log)
  }

  /** Waits for `wait` without counting the row among those worked on: the rows it waits for can be claimed meanwhile. */
  protected async idling<T>(wait: Promise<T>): Promise<T> {
    this.idle++
    this.nudge()
    try {
      return await wait
    } finally {
      this.idle--
    }
  }

  /** Works on a claimed row (its snapshot upgraded to the current version) until it settles or `ac` aborts. */
  protected abstract work(row: Row, ac: AbortController): Promise<unknown>

  /** The work on `row` ended with `err`: log what is worth logging (the row is claimed again after its lease). */
  protected abstract failed(row: Row, err: unknown): void

  /** What a row's work is aborted with (its controller's reason). */
  protected stopped(why: 'stopping' | 'lease lost'): unknown {
    return new Error(why)
  }

  override start() {
    super.start()
    this.heartbeat = setInterval(() => void this.beat(), this.lease.leaseMs / 3)
  }

  /** Stops claiming, aborts the work in flight, then gives every held row back. */
  override async stop() {
    await super.stop()
    if (this.heartbeat) clearInterval(this.heartbeat)
    for (const ac of this.active.values()) ac.abort(this.stopped('stopping'))
    await this.stopping()
    await leases.releaseAll(this.sql, this.lease.table, this.owner).catch((err) => this.log.error({ err }, `${this.lease.what}: releasing leases failed`))
  }

  /** Between aborting the work and releasing the rows (close what the work used). */
  protected async stopping(): Promise<void> {}

  protected async step(): Promise<boolean> {
    const room = this.lease.max - this.active.size + this.idle
    if (room <= 0) return false
    const claimed = await leases.claim<Row>(this.sql, this.lease.table, this.owner, this.lease.leaseMs, room, this.lease.perWorkspace)
    for (const stored of claimed) {
      const ac = new AbortController()
      this.active.set(stored.id, ac)
      void Promise.resolve()
        .then(() => this.work(loadRow(this.lease.definition, stored), ac))
        .catch((err) => {
          if (err instanceof NewerSnapshot) this.log.warn({ id: stored.id, err: err.message }, `${this.lease.what}: left a row of a newer version alone`)
          else this.failed(stored, err)
        })
        .finally(() => {
          this.active.delete(stored.id)
          // A place is free: the next row (perhaps held back by its workspace's share until now) is claimed at once.
          this.nudge()
        })
    }
    return claimed.length === room
  }

  private async beat() {
    const ids = [...this.active.keys()]
    const held = new Set(await leases.heartbeat(this.sql, this.lease.table, this.owner, ids, this.lease.leaseMs).catch(() => ids))
    for (const id of ids) if (!held.has(id)) this.active.get(id)?.abort(this.stopped('lease lost'))
  }
}
