import { IoRedis } from './ioredis'
import { MemoryRedis } from './memory'
import type { RedisPort } from './port'

export { RedisUnavailableError, type RedisPort } from './port'

export function openRedis(url: string | null, prefix = 'ap:'): RedisPort {
  return url ? new IoRedis(url, prefix) : new MemoryRedis()
}
