/**
 * Internal: what the Redis driver declares (see drivers/definition.ts). Not a package entry.
 * @module
 */
import type { DriverDefinition } from './definition.js';
import { REDIS_CLUSTER_FORM, REDIS_SENTINEL_FORM, parseRedisClusterUrl, parseRedisSentinelUrl } from './redis-url.js';
import { parseUrl } from './utils.js';

export const redisDriver: DriverDefinition = {
  name: 'redis',
  factory: 'redisStore',
  schemes: ['redis', 'rediss', 'redis+cluster', 'rediss+cluster', 'redis+sentinel', 'rediss+sentinel'],
  forms: [
    'redis://[user:password@]host[:port][/db]',
    'rediss://… (TLS)',
    `${REDIS_CLUSTER_FORM} (Redis Cluster; rediss+cluster:// for TLS)`,
    `${REDIS_SENTINEL_FORM} (Redis Sentinel)`,
  ],
  packages: ['keyv', '@keyv/redis'],
  adapter: {
    pkg: '@keyv/redis',
    construct: 'new KeyvRedis(url)',
    is: (value) => {
      const candidate = value as { client?: unknown; getClient?: unknown } | null;
      return (
        typeof candidate === 'object' &&
        candidate !== null &&
        typeof candidate.getClient === 'function' &&
        typeof candidate.client === 'object' &&
        candidate.client !== null
      );
    },
  },
  namespace: 'prefix',
  checkUrl(url) {
    const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase() ?? '';
    if (scheme.endsWith('+cluster') || scheme.endsWith('+sentinel')) {
      // Several hosts: not a WHATWG URL, parsed by redis-url.ts (which loads no client).
      try {
        if (scheme.endsWith('+cluster')) parseRedisClusterUrl(url);
        else parseRedisSentinelUrl(url);
        return undefined;
      } catch (error) {
        const message = (error as Error).message;
        return { reason: message.replace(/^Expected/, 'expected'), expected: message.replace(/^Expected /, '') + ' in' };
      }
    }
    const parsed = parseUrl(url);
    if (!parsed) return { reason: 'it is not a valid Redis URL', expected: 'a valid Redis URL, got' };
    if (!parsed.hostname) return { reason: 'the Redis URL has no host', expected: 'a host in the Redis URL' };
    if (parsed.pathname !== '' && parsed.pathname !== '/' && !/^\/\d+$/.test(parsed.pathname)) {
      return {
        reason: `the Redis URL path must be a database number such as /0, got ${JSON.stringify(parsed.pathname)}`,
        expected: `the Redis URL path to be a database number (redis://host:6379/0), got ${JSON.stringify(parsed.pathname)} in`,
      };
    }
    return undefined;
  },
  options: (common) => ({
    ...(common.timeoutMs !== undefined ? { timeoutMs: common.timeoutMs } : {}),
    ...(common.namespace !== undefined ? { namespace: common.namespace } : {}),
  }),
};
