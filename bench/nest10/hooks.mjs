// Module resolution hook (see register.mjs).
const here = new URL('./package.json', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@nestjs/') || specifier.startsWith('@node-idempotency/nestjs')) return next(specifier, { ...context, parentURL: here });
  return next(specifier, context);
}
