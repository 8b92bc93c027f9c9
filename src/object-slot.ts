/**
 * A value the layer keeps per request or response object (a request's `inTransaction`
 * hook, a response's capture, a mark that a request was handled): on the object under a
 * symbol when the engine adds that property cheaply, else in a `WeakMap`, found the same
 * way. Knows no framework: an adapter says which objects must not take properties.
 *
 * Why not always a `WeakMap`: an entry keeps its key, and all the key holds, alive through
 * every young-generation collection until the next full one (on Koa, young collections took
 * five times as long). Why not always a property: a framework that sets the prototype of an
 * object after its constructor built it (Express does so to Node's request and response)
 * leaves an object on which each added property builds a hidden class of its own, 3 to
 * 30 µs per request.
 * @module
 */

/** Prototypes whose objects get no property from the layer (see declareReprototyped). */
const propertiesKeptOff = new WeakSet<object>();

/**
 * Declared by an adapter for objects its framework set a prototype on after building them
 * (Express's requests and responses, which get their app's `app.request` / `app.response`):
 * values for objects with the same prototype go to a side table. Cheap to call for every
 * request: each prototype is remembered once.
 */
export function declareReprototyped(object: object, other?: object): void {
  const prototype = Object.getPrototypeOf(object) as object | null;
  // A class's own prototype (a plain Node message, where the adapter runs without Express)
  // is never declared: its objects were not re-prototyped, and take properties cheaply.
  if (prototype !== null && !Object.prototype.hasOwnProperty.call(prototype, 'constructor')) propertiesKeptOff.add(prototype);
  if (other !== undefined) declareReprototyped(other);
}

/** One kind of value kept per object. */
export class ObjectSlot<T> {
  readonly #symbol: symbol;
  readonly #side = new WeakMap<object, T>();

  constructor(name: string) {
    this.#symbol = Symbol(`idempotency-kit.${name}`);
  }

  get(object: object): T | undefined {
    // The side table first, as in `delete`, then an own-property check: on a re-prototyped
    // object a property read that misses walks the whole prototype chain in the runtime
    // (each such object has a hidden class of its own, so no inline cache holds), about
    // 1 µs, while a table lookup is one hash probe and the own check ~0.1 µs.
    const side = this.#side.get(object);
    if (side !== undefined) return side;
    return Object.prototype.hasOwnProperty.call(object, this.#symbol) ? (object as Record<symbol, T | undefined>)[this.#symbol] : undefined;
  }

  set(object: object, value: T): void {
    if (takesProperty(object)) (object as Record<symbol, T>)[this.#symbol] = value;
    else this.#side.set(object, value);
  }

  delete(object: object): void {
    // The side table first: an own-property check on a re-prototyped object costs more.
    if (!this.#side.delete(object) && Object.prototype.hasOwnProperty.call(object, this.#symbol)) {
      (object as Record<symbol, T | undefined>)[this.#symbol] = undefined;
    }
  }
}

/** Whether a property can go on `object`: it can take one, and its prototype was not declared against it. */
function takesProperty(object: object): boolean {
  const prototype = Object.getPrototypeOf(object) as object | null;
  return prototype !== null && !propertiesKeptOff.has(prototype) && Object.isExtensible(object);
}
