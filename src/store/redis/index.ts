import { IoRedis } from './ioredis'
import { MemoryRedis, type Durable } from './memory'
import type { RedisPort } from './port'

export { RedisUnavailableError, type RedisPort } from './port'

/**
 * Real Redis at `url`, or the in-process stand-in; `durable` names the keys the stand-in must keep
 * across restarts (real Redis keeps them itself).
 */
export function openRedis(url: string | null, prefix = 'ap:', durable?: Durable): RedisPort {
  return url ? new IoRedis(url, prefix) : new MemoryRedis(Date.now, durable)
}
