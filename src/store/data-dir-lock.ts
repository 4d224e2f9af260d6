import { dlopen, FFIType } from 'bun:ffi'
import { closeSync, openSync, readFileSync, readlinkSync, rmSync, writeSync } from 'node:fs'
import { hostname } from 'node:os'
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
/** How long a start polls a holder in another PID namespace (a container gone a moment ago) before refusing. */
const FOREIGN_WAIT_MS = 3000

/**
 * Two processes on one PGlite directory corrupt it, so the first takes a lock file holding its pid
 * and, on Linux, its start time (clock ticks after boot, /proc/<pid>/stat field 22). A holder that
 * is gone, or whose pid now names another program (its start time differs), is stale and taken over.
 * A holder that is exiting (SIGKILLed and being torn down by the kernel, or a zombie not yet reaped)
 * still exists for a while: a process with gigabytes mapped takes seconds to unmap. The start waits
 * for it, up to `waitMs`; a live holder that is not exiting is refused at once.
 *
 * Two containers sharing a volume see each other's pids as nothing (each may be pid 1 of its own
 * PID namespace), so the lock also names the holder's PID namespace and host name, and the holder
 * keeps an flock(2) on the file for its life: the kernel drops it when the holder's files close,
 * whatever namespace it ran in. A holder of another namespace is live while its flock is held
 * (polled for FOREIGN_WAIT_MS, then refused) and stale once it is not.
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
      writeSync(fd, own ? `${process.pid}\n${own.startTime}\n${OWN_NAMESPACE}\n` : `${process.pid}\n`)
      // Held until the process ends (the descriptor stays open); nobody else has the new file yet.
      tryFlock(fd)
      return () => {
        rmSync(path, { force: true })
        closeSync(fd)
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    const holder = holderOf(path)
    if (holder.kind === 'foreign') {
      if (await foreignHolderGone(path, opts.waitMs)) {
        rmSync(path, { force: true })
        takeovers++
        continue
      }
      throw new DataDirLockedError(inUse(dir, `${holder.pid} of another PID namespace (host ${holder.host}: another container?)`))
    }
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

function inUse(dir: string, pid: number | string): string {
  return `DATA_DIR ${dir} is in use by process ${pid}; the embedded database allows one process (set DATABASE_URL for several)`
}

type Holder = { kind: 'stale' } | { kind: 'live'; pid: number } | { kind: 'exiting'; pid: number; zombie: boolean } | { kind: 'foreign'; pid: number; host: string }

/** This process' PID namespace and host, as the lock file's third line says them ("pidns:[…] host"). */
const OWN_NAMESPACE = `${namespaceOf()} ${hostname()}`

function namespaceOf(): string {
  try {
    return readlinkSync('/proc/self/ns/pid')
  } catch {
    return 'pid:[?]'
  }
}

/** flock(2) from the C library, where there is one (Linux, macOS); null elsewhere. */
const flock = (() => {
  try {
    const lib = dlopen(process.platform === 'darwin' ? 'libc.dylib' : 'libc.so.6', { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } })
    return lib.symbols.flock
  } catch {
    return null
  }
})()
const LOCK_EX = 2
const LOCK_NB = 4

/** An exclusive flock on `fd` without waiting: whether it was taken (true where there is no flock). */
export function tryFlock(fd: number): boolean {
  return flock ? flock(fd, LOCK_EX | LOCK_NB) === 0 : true
}

/**
 * Whether the holder of another namespace is gone: its flock free (probed on a descriptor of our
 * own, closed again, which drops the probe's flock). Polled for up to FOREIGN_WAIT_MS.
 */
async function foreignHolderGone(path: string, waitMs: number): Promise<boolean> {
  const deadline = Date.now() + Math.min(waitMs, FOREIGN_WAIT_MS)
  for (;;) {
    let fd: number
    try {
      fd = openSync(path, 'r')
    } catch {
      return true // removed meanwhile
    }
    try {
      if (tryFlock(fd)) return true
    } finally {
      closeSync(fd)
    }
    if (Date.now() >= deadline) return false
    await Bun.sleep(POLL_MS)
  }
}

function holderOf(path: string): Holder {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch {
    return { kind: 'stale' } // removed meanwhile: try again
  }
  const [pidText, startTime, namespace] = text.trim().split('\n')
  const pid = Number(pidText)
  // Written by a process of another PID namespace (another container): its pid says nothing here.
  if (namespace && Number.isSafeInteger(pid) && pid > 0 && namespace.split(' ')[0] !== OWN_NAMESPACE.split(' ')[0]) {
    return { kind: 'foreign', pid, host: namespace.split(' ').slice(1).join(' ') || '?' }
  }
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
