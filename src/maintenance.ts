/**
 * Helpers the drivers share for the optional maintenance methods of a store
 * (`delete`, `stats`, `sweep`), which the command line uses.
 * @module
 */
import type { MaintenanceOptions, StoreStats } from './store.js';

/** One row of `SELECT <state or 'expired'>, count(*), min(expires_at) … GROUP BY 1`. */
export interface StatsGroup {
  state: string;
  n: number | string;
  oldest: number | string | null;
}

/** Fold an SQL driver's grouped counts into {@link StoreStats}. */
export function statsFromGroups(groups: StatsGroup[], options: MaintenanceOptions = {}): StoreStats {
  const stats: StoreStats = { processing: 0, completed: 0, expired: 0, oldestExpiresAt: undefined };
  for (const group of groups) {
    if (group.state === 'processing' || group.state === 'completed' || group.state === 'expired') stats[group.state] += Number(group.n);
    const oldest = group.oldest === null ? undefined : Number(group.oldest);
    if (oldest !== undefined && (stats.oldestExpiresAt === undefined || oldest < stats.oldestExpiresAt)) stats.oldestExpiresAt = oldest;
  }
  options.onProgress?.(stats.processing + stats.completed + stats.expired);
  return stats;
}
