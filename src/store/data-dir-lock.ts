import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'

export class DataDirLockedError extends Error {}

export interface DataDirLockOptions {
  /** How long a start waits for a holder that is exiting (docs/deployment.md, the data directory's lock). */
  waitMs: number
  /** Told once, when the start begins to wait. */
  onWait?: (message: string) => void
}

/** Linux's PF_EXITING (include/linux/sched.h): set from the start of a process' exit to its end. */
const PF_EXITING = 0x4
const POLL_MS = 50

/**
 * Two processes on one PGlite directory corrupt it, so the first takes a lock file holding its pid
 * and, on Linux, its start time (clock ticks after boot, /proc/<pid>/stat field 22). A holder that
 * is gone, or whose pid now names another program (its start time differs), is stale and taken over.
 * A holder that is exiting (SIGKILLed and being torn down by the kernel, or a zombie not yet reaped)
 * still exists for a while: a process with gigabytes mapped takes seconds to unmap. The start waits
 * for it, up to `waitMs`; a live holder that is not exiting is refused at once.
 */
export async function lockDataDir(dir: string, opts: DataDirLockOptions): Promise<() => void> {
  const path = join(dir, 'pglite.lock')
  const deadline = Date.now() + opts.waitMs
  const own = processStat(process.pid)
  let waiting = false
  // Each stale lock removed is a chance for another start to have written its own since: a few
  // rounds, then give up rather than spin.
  for (let takeovers = 0; takeovers < 3; ) {
    try {
      const fd = openSync(path, 'wx')
      writeSync(fd, own ? `${process.pid}\n${own.startTime}\n` : `${process.pid}\n`)
      closeSync(fd)
      return () => rmSync(path, { force: true })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    const holder = holderOf(path)
    if (holder.kind === 'live') throw new DataDirLockedError(inUse(dir, holder.pid))
    if (holder.kind === 'exiting') {
      if (Date.now() < deadline) {
        if (!waiting) opts.onWait?.(`waiting for pid ${holder.pid} (exiting) to release DATA_DIR ${dir} (up to ${Math.round(opts.waitMs / 1000)} s)`)
        waiting = true
        await Bun.sleep(POLL_MS)
        continue
      }
      // A zombie has closed every file it had (the kernel does so before it becomes one); only its
      // parent's wait() is missing. Anything else still exiting may yet write.
      if (!holder.zombie) throw new DataDirLockedError(`${inUse(dir, holder.pid)}; it has been exiting for more than ${opts.waitMs} ms`)
    }
    rmSync(path, { force: true })
    takeovers++
  }
  throw new DataDirLockedError(`could not lock DATA_DIR ${dir}`)
}

function inUse(dir: string, pid: number): string {
  return `DATA_DIR ${dir} is in use by process ${pid}; the embedded database allows one process (set DATABASE_URL for several)`
}

type Holder = { kind: 'stale' } | { kind: 'live'; pid: number } | { kind: 'exiting'; pid: number; zombie: boolean }

function holderOf(path: string): Holder {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch {
    return { kind: 'stale' } // removed meanwhile: try again
  }
  const [pidText, startTime] = text.trim().split(/\s+/)
  const pid = Number(pidText)
  // Our own pid is a lock left by an earlier life of this pid (a container's PID 1 restarted).
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return { kind: 'stale' }
  const stat = processStat(pid)
  // No /proc (not Linux) or not readable: all we can tell is whether the pid exists.
  if (!stat) return isAlive(pid) ? { kind: 'live', pid } : { kind: 'stale' }
  if (startTime && stat.startTime !== startTime) return { kind: 'stale' }
  const zombie = stat.state === 'Z' || stat.state === 'X' || stat.state === 'x'
  if (zombie || (stat.flags & PF_EXITING) !== 0) return { kind: 'exiting', pid, zombie }
  return { kind: 'live', pid }
}

/** State letter, flags and start time from /proc/<pid>/stat (proc(5)); null when there is none. */
function processStat(pid: number): { state: string; flags: number; startTime: string } | null {
  let text: string
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch {
    return null
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')': split after the last one.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  const [state, flags, startTime] = [fields[0], fields[6], fields[19]]
  if (!state || flags === undefined || startTime === undefined) return null
  return { state, flags: Number(flags), startTime }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
