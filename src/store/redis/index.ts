import { MemoryRedis, type Durable } from './memory'
import type { RedisPort } from './port'

export { RedisUnavailableError, type RedisPort } from './port'

/**
 * Real Redis at `url`, or the in-process stand-in; `durable` names the keys the stand-in must keep
 * across restarts (real Redis keeps them itself). ioredis (~14 MB resident) is loaded only for real
 * Redis: the embedded default never needs it (bench/README.memory.md).
 */
export function openRedis(url: string | null, prefix = 'ap:', durable?: Durable): RedisPort {
  if (!url) return new MemoryRedis(Date.now, durable)
  const { IoRedis } = require('./ioredis') as typeof import('./ioredis')
  return new IoRedis(url, prefix)
}
