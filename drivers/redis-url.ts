/**
 * Redis URLs with several hosts: a Cluster, `redis+cluster://[user[:password]@]host:port[,host:port…]`,
 * and Sentinel, `redis+sentinel://[user[:password]@]host:port[,host:port…]/<primary name>`
 * (`rediss+…` for TLS). Parsed without loading a Redis client, so `createStore()` can
 * reject a bad URL at once.
 * @module
 */
import { redactUrl } from './utils.js';

export interface RedisClusterUrl {
  tls: boolean;
  username?: string;
  password?: string;
  /** The seed nodes; the client learns the rest of the cluster from any one of them. */
  nodes: { host: string; port: number }[];
}

export interface RedisSentinelUrl extends RedisClusterUrl {
  /** The primary's name in the sentinels' configuration (`sentinel monitor <name> …`). */
  name: string;
}

export const REDIS_CLUSTER_FORM = 'redis+cluster://[user:password@]host:port[,host:port…]';
export const REDIS_SENTINEL_FORM = 'redis+sentinel://[user:password@]sentinel:port[,sentinel:port…]/primary-name';

export function isRedisClusterUrl(url: string): boolean {
  return /^rediss?\+cluster:/i.test(url);
}

export function isRedisSentinelUrl(url: string): boolean {
  return /^rediss?\+sentinel:/i.test(url);
}

function decode(part: string, what: string, shown: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new TypeError(`Expected the ${what} in the Redis Cluster URL ${shown} to be percent-encoded`);
  }
}

/** Credentials and host:port list of a multi-host URL's authority. */
function parseAuthority(authority: string, kind: string, defaultPort: number, shown: string): Omit<RedisClusterUrl, 'tls'> {
  const at = authority.lastIndexOf('@');
  const result: Omit<RedisClusterUrl, 'tls'> = { nodes: [] };
  if (at >= 0) {
    const credentials = authority.slice(0, at);
    const colon = credentials.indexOf(':');
    const username = decode(colon >= 0 ? credentials.slice(0, colon) : credentials, 'user name', shown);
    if (username !== '') result.username = username;
    if (colon >= 0) result.password = decode(credentials.slice(colon + 1), 'password', shown);
  }
  for (const seed of authority.slice(at + 1).split(',')) {
    const node = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::(\d+))?$/.exec(seed);
    const port = node?.[2] === undefined ? defaultPort : Number(node[2]);
    if (!node || port < 1 || port > 65535) {
      throw new TypeError(`Expected each ${kind} node of the Redis URL ${shown} to be host[:port], got ${JSON.stringify(seed)}`);
    }
    result.nodes.push({ host: node[1]!.replace(/^\[(.*)\]$/, '$1'), port });
  }
  return result;
}

/**
 * Parse a Redis Cluster URL. Throws a TypeError naming the problem (password masked).
 * The default port is 6379; a database number is refused (a cluster has only database 0).
 */
export function parseRedisClusterUrl(url: string): RedisClusterUrl {
  const shown = redactUrl(url);
  const match = /^(rediss?)\+cluster:\/\/([^/?#]*)(\/?)([?#].*)?$/i.exec(url);
  if (!match) {
    if (/^rediss?\+cluster:\/\/[^/?#]*\/./i.test(url)) {
      throw new TypeError(`Expected no database number in the Redis Cluster URL ${shown}: a cluster has only database 0`);
    }
    throw new TypeError(`Expected a Redis Cluster URL of the form ${REDIS_CLUSTER_FORM}, got ${shown}`);
  }
  const [, scheme, authority, , rest] = match;
  if (rest) throw new TypeError(`Expected no query or fragment in the Redis Cluster URL ${shown}`);
  return { tls: scheme!.toLowerCase() === 'rediss', ...parseAuthority(authority!, 'seed', 6379, shown) };
}

/**
 * Parse a Redis Sentinel URL: the hosts are sentinels (default port 26379), the path is the
 * primary's name. User and password are for the data nodes (the primary and replicas).
 */
export function parseRedisSentinelUrl(url: string): RedisSentinelUrl {
  const shown = redactUrl(url);
  const match = /^(rediss?)\+sentinel:\/\/([^/?#]*)\/([^/?#]+)([?#].*)?$/i.exec(url);
  if (!match) throw new TypeError(`Expected a Redis Sentinel URL of the form ${REDIS_SENTINEL_FORM}, got ${shown}`);
  const [, scheme, authority, name, rest] = match;
  if (rest) throw new TypeError(`Expected no query or fragment in the Redis Sentinel URL ${shown}`);
  return {
    tls: scheme!.toLowerCase() === 'rediss',
    name: decode(name!, 'primary name', shown),
    ...parseAuthority(authority!, 'sentinel', 26379, shown),
  };
}
