/**
 * The kill switch: the environment variable `IDEMPOTENCY_KIT_DISABLED` turns the layer off
 * (every request and call runs unprotected), for local runs and incidents. Read when a
 * layer or wrapper is made; said loudly once per process; refused with
 * `NODE_ENV=production` unless its value is `force`.
 * @module
 */

/** The variable's name. */
export const KILL_SWITCH_ENV = 'IDEMPOTENCY_KIT_DISABLED';

let announced = false;

/**
 * Whether the layer is switched off. `1` or `true`: off, except with `NODE_ENV=production`,
 * where it throws (a forgotten local setting must not ship); `force`: off anywhere. Any
 * other value, or none: on.
 */
export function idempotencyDisabled(): boolean {
  const env = globalThis.process?.env;
  const value = env?.[KILL_SWITCH_ENV]?.trim().toLowerCase();
  if (value === undefined || value === '' || value === '0' || value === 'false') return false;
  if (value !== '1' && value !== 'true' && value !== 'force') {
    throw new TypeError(`Expected ${KILL_SWITCH_ENV} to be 1, true, force, 0 or false, got ${JSON.stringify(env![KILL_SWITCH_ENV])}`);
  }
  if (value !== 'force' && env?.NODE_ENV === 'production') {
    const error = new Error(
      `idempotency-kit: refusing ${KILL_SWITCH_ENV}=${env![KILL_SWITCH_ENV]} with NODE_ENV=production: every retried request would run again. ` +
        `To switch idempotency off in production anyway (an incident), set ${KILL_SWITCH_ENV}=force.`,
    );
    (error as Error & { code: string }).code = 'IDEMPOTENCY_DISABLED_IN_PRODUCTION';
    throw error;
  }
  if (!announced) {
    announced = true;
    console.error(
      `idempotency-kit: ${KILL_SWITCH_ENV} is set: idempotency is OFF in this process. Every request and call runs unprotected: ` +
        'retries run the handler again and no response is stored or replayed.',
    );
  }
  return true;
}
