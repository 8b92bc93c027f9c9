/**
 * Redis Cluster URLs: `redis+cluster://[user[:password]@]host:port[,host:port…]` (and
 * `rediss+cluster://` for TLS). Parsed without loading a Redis client, so `createStore()`
 * can reject a bad URL at once.
 * @module
 */

export interface RedisClusterUrl {
  tls: boolean;
  username?: string;
  password?: string;
  /** The seed nodes; the client learns the rest of the cluster from any one of them. */
  nodes: { host: string; port: number }[];
}

/** The URL schemes of a Redis Cluster. */
export const REDIS_CLUSTER_SCHEMES = ['redis+cluster', 'rediss+cluster'] as const;

export const REDIS_CLUSTER_FORM = 'redis+cluster://[user:password@]host:port[,host:port…]';

/** The URL as shown in errors: a password never reaches a log. */
export function redactRedisUrl(url: string): string {
  return JSON.stringify(url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/, '$1***@'));
}

export function isRedisClusterUrl(url: string): boolean {
  return /^rediss?\+cluster:/i.test(url);
}

function decode(part: string, what: string, shown: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new TypeError(`Expected the ${what} in the Redis Cluster URL ${shown} to be percent-encoded`);
  }
}

/**
 * Parse a Redis Cluster URL. Throws a TypeError naming the problem (password masked).
 * The default port is 6379; a database number is refused (a cluster has only database 0).
 */
export function parseRedisClusterUrl(url: string): RedisClusterUrl {
  const shown = redactRedisUrl(url);
  const match = /^(rediss?)\+cluster:\/\/([^/?#]*)(\/?)([?#].*)?$/i.exec(url);
  if (!match) {
    if (/^rediss?\+cluster:\/\/[^/?#]*\/./i.test(url)) {
      throw new TypeError(`Expected no database number in the Redis Cluster URL ${shown}: a cluster has only database 0`);
    }
    throw new TypeError(`Expected a Redis Cluster URL of the form ${REDIS_CLUSTER_FORM}, got ${shown}`);
  }
  const [, scheme, authority, , rest] = match;
  if (rest) throw new TypeError(`Expected no query or fragment in the Redis Cluster URL ${shown}`);
  const at = authority!.lastIndexOf('@');
  const hosts = authority!.slice(at + 1);
  const result: RedisClusterUrl = { tls: scheme!.toLowerCase() === 'rediss', nodes: [] };
  if (at >= 0) {
    const credentials = authority!.slice(0, at);
    const colon = credentials.indexOf(':');
    const username = decode(colon >= 0 ? credentials.slice(0, colon) : credentials, 'user name', shown);
    if (username !== '') result.username = username;
    if (colon >= 0) result.password = decode(credentials.slice(colon + 1), 'password', shown);
  }
  for (const seed of hosts.split(',')) {
    const node = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::(\d+))?$/.exec(seed);
    const port = node?.[2] === undefined ? 6379 : Number(node[2]);
    if (!node || port < 1 || port > 65535) {
      throw new TypeError(`Expected each seed node of the Redis Cluster URL ${shown} to be host[:port], got ${JSON.stringify(seed)}`);
    }
    result.nodes.push({ host: node[1]!.replace(/^\[(.*)\]$/, '$1'), port });
  }
  return result;
}
