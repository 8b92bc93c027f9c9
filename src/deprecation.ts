/**
 * Names kept for one minor release after a rename: each old name still works and warns
 * once per process, naming its replacement (a `DeprecationWarning` on Node, `console.warn`
 * elsewhere). The CHANGELOG lists every old name with its new one.
 * @module
 */

const warned = new Set<string>();

/** Warn once per process that `oldName` is deprecated in favour of `newName`. */
export function warnDeprecated(oldName: string, newName: string): void {
  if (warned.has(oldName)) return;
  warned.add(oldName);
  const message = `idempotency-kit: ${oldName} is deprecated and goes in the next minor release; use ${newName} instead`;
  const emit = (globalThis as { process?: { emitWarning?: (message: string, options: object) => void } }).process?.emitWarning;
  if (typeof emit === 'function') emit.call(globalThis.process, message, { type: 'DeprecationWarning', code: 'IDEMPOTENCY_KIT_DEPRECATED' });
  else console.warn(message);
}

/**
 * Read a renamed option: the new name's value, else the old name's (with a warning). Both
 * given is a TypeError, since one of them would be silently ignored.
 */
export function renamedOption<T>(options: object, oldName: string, newName: string): T | undefined {
  const record = options as Record<string, unknown>;
  const value = record[newName];
  const old = record[oldName];
  if (old === undefined) return value as T | undefined;
  if (value !== undefined) {
    throw new TypeError(`Expected one of \`${newName}\` and \`${oldName}\` (its deprecated name), got both`);
  }
  warnDeprecated(`the \`${oldName}\` option`, `\`${newName}\``);
  return old as T;
}

/**
 * A class under its deprecated name: `new` and `instanceof` work as on the class itself
 * (errors the library throws are instances of both), and the first use warns.
 */
export function deprecatedClass<C extends abstract new (...args: never[]) => unknown>(target: C, oldName: string, newName: string): C {
  const warn = () => warnDeprecated(oldName, newName);
  const proxy: C = new Proxy(target, {
    construct(cls, args, newTarget) {
      warn();
      return Reflect.construct(cls, args, newTarget === proxy ? cls : newTarget) as object;
    },
    get(cls, property, receiver) {
      if (property === Symbol.hasInstance) warn();
      return Reflect.get(cls, property, receiver === proxy ? cls : receiver);
    },
  });
  return proxy;
}

/** A function under its deprecated name: it calls the renamed one, and the first call warns. */
export function deprecatedFunction<F extends (...args: never[]) => unknown>(target: F, oldName: string, newName: string): F {
  return function (this: unknown, ...args: Parameters<F>) {
    warnDeprecated(oldName, newName);
    return target.apply(this, args);
  } as F;
}
