/**
 * `@Idempotent()` in the OpenAPI document of `@nestjs/swagger`, when the application has
 * it: each protected HTTP handler gets the key header and the layer's error responses, as
 * its own layer (module, class and handler options merged) says. Without `@nestjs/swagger`
 * nothing happens; it is never a dependency. Run when the module's interceptor is made,
 * which Nest does before `SwaggerModule.createDocument()` can run.
 * @module
 */
import { RequestMethod, type Type } from '@nestjs/common';
import { Reflector, type ModulesContainer } from '@nestjs/core';
import type { Idempotency } from '../../src/http.js';
import { idempotencyContract, inlineContract } from '../../src/openapi.js';
import { optionalPeer } from '../../src/optional-peer.js';
import { httpCodeOf, routeMethod } from './nest-private.js';

/** What this file uses of `@nestjs/swagger`. */
export interface NestSwagger {
  ApiHeader(options: Record<string, unknown>): MethodDecorator;
  ApiResponse(options: Record<string, unknown>): MethodDecorator;
  /** Its metadata keys (public: `DECORATORS` from its entry). */
  DECORATORS?: { API_RESPONSE?: string };
}

/** `@nestjs/swagger` if the application has it, resolved once; null when absent. */
export const loadNestSwagger = optionalPeer<NestSwagger>('@nestjs/swagger');

/** Handlers documented already: a second module, or a second application in one process, adds nothing twice. */
const documented = new WeakSet<Function>();

/**
 * Document every protected HTTP handler of the application's controllers for
 * `@nestjs/swagger` (`swagger`, or the installed one). `layerFor` is the interceptor's;
 * a handler whose options are wrong is left for the interceptor's checks at start.
 */
export function documentHandlers<Req>(
  modules: ModulesContainer | undefined,
  layerFor: (controller: Type<unknown>, handler: Function) => Idempotency<Req> | null,
  swagger: NestSwagger | null = loadNestSwagger(),
): void {
  if (swagger === null || modules === undefined) return;
  const reflector = new Reflector();
  for (const module of modules.values()) {
    for (const wrapper of module.controllers.values()) {
      const controller = wrapper.metatype as Type<unknown> | null | undefined;
      if (typeof controller !== 'function' || typeof controller.prototype !== 'object') continue;
      const proto = controller.prototype as Record<string, unknown>;
      for (const name of Object.getOwnPropertyNames(proto)) {
        const descriptor = Object.getOwnPropertyDescriptor(proto, name);
        const handler = descriptor?.value as Function | undefined;
        if (name === 'constructor' || typeof handler !== 'function' || documented.has(handler)) continue;
        const method = routeMethod(handler);
        if (method === undefined) continue; // not a route
        let layer: Idempotency<Req> | null;
        try {
          layer = layerFor(controller, handler);
        } catch {
          continue;
        }
        const verb = RequestMethod[method];
        if (layer === null || (verb !== 'ALL' && !layer.covers(verb))) continue;
        documented.add(handler);
        const inline = inlineContract(idempotencyContract(layer, '3.0'));
        // Without response decorators of its own, @nestjs/swagger would write the handler's
        // success response (201 for POST, else 200, or its @HttpCode): kept, with the replay header.
        if (reflector.get<unknown>(swagger.DECORATORS?.API_RESPONSE ?? 'swagger/apiResponse', handler) === undefined) {
          const status = httpCodeOf(handler) ?? (method === RequestMethod.POST ? 201 : 200);
          swagger.ApiResponse({ status, description: '', headers: { [inline.replayedHeader.name]: inline.replayedHeader.header } })(proto, name, descriptor!);
        }
        const { name: header, ...parameter } = inline.parameter;
        swagger.ApiHeader({ ...parameter, name: header, in: undefined })(proto, name, descriptor!);
        for (const [status, response] of Object.entries(inline.responses)) {
          swagger.ApiResponse({ ...response, status: Number(status) })(proto, name, descriptor!);
        }
      }
    }
  }
}
