/**
 * `@Idempotent()` in the document of `@nestjs/swagger` (H21): with no other decorator, each
 * protected handler gets the key header and the refusals of its own layer (module, class
 * and handler options merged); unprotected handlers get nothing. The document validates
 * and its generated client has the header on exactly the protected operations. Without
 * `@nestjs/swagger` nothing is documented (and nothing loads it).
 */
import 'reflect-metadata';
import { Body, Controller, Get, Module, Param, Patch, Post, type INestApplication } from '@nestjs/common';
import { ModulesContainer } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { ApiParam, DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { Test } from '@nestjs/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { Idempotent, IdempotencyModule, SkipIdempotency } from '../../adapters/nestjs/index.js';
import { documentHandlers } from '../../adapters/nestjs/nest-swagger.js';
import { memoryStore } from '../../drivers/memory.js';
import type { OpenApiDocument } from '../../src/openapi.js';
import { addedParts, clientTypesErrors, expectValidDocument } from '../helpers/openapi.js';

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  create(@Body() body: unknown) {
    return { id: 1, body };
  }

  @Get()
  list() {
    return [];
  }

  @Post('search')
  search() {
    return [];
  }
}

@Controller('payments')
@Idempotent({ maxKeyLength: 64, required: false })
class PaymentsController {
  @Post()
  pay() {
    return { ok: true };
  }

  @Patch(':id')
  // Named: the tests run without emitted decorator metadata, from which @nestjs/swagger reads parameters.
  @ApiParam({ name: 'id', type: String })
  change(@Param('id') id: string) {
    return { ok: true, id };
  }

  @Post('quote')
  @SkipIdempotency()
  quote() {
    return { ok: true };
  }
}

let app: INestApplication | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function documentOf(platform: 'express' | 'fastify'): Promise<OpenApiDocument> {
  @Module({
    imports: [IdempotencyModule.forRoot({ store: memoryStore(), scope: 'shared', maxBodyBytes: 4096 })],
    controllers: [OrdersController, PaymentsController],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  app = moduleRef.createNestApplication(platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(), { logger: false });
  return SwaggerModule.createDocument(app, new DocumentBuilder().setTitle('Orders').setVersion('1').build()) as unknown as OpenApiDocument;
}

const covered = { 'POST /orders': true, 'POST /payments': false, 'PATCH /payments/{id}': false };

describe('@Idempotent() with @nestjs/swagger (H21)', () => {
  for (const platform of ['express', 'fastify'] as const) {
    it(`H21: ${platform}: the document validates, and its client has the header on exactly the protected operations`, async () => {
      const document = await documentOf(platform);
      await expectValidDocument(document);
      expect(await clientTypesErrors(document, covered)).toEqual([]);
      const post = document.paths!['/orders']!.post as { responses: Record<string, { description: string }> };
      expect(Object.keys(post.responses).sort()).toEqual(['201', '400', '409', '413', '422', '503']);
      expect(post.responses['201']).toHaveProperty(['headers', 'Idempotent-Replayed']);
      expect(post.responses['413']!.description).toContain('4096 bytes');
      // The class's own limit: 64 characters.
      const pay = document.paths!['/payments']!.post as { parameters: { schema: { pattern: string } }[] };
      expect(new RegExp(pay.parameters[0]!.schema.pattern).test('k'.repeat(64))).toBe(true);
      expect(new RegExp(pay.parameters[0]!.schema.pattern).test('k'.repeat(65))).toBe(false);
      if (platform === 'express') {
        await expect(JSON.stringify(addedParts(document, Object.keys(covered)), null, 2)).toMatchFileSnapshot('./__snapshots__/openapi-nestjs.json');
      }
    });
  }

  it('H21: without @nestjs/swagger nothing is documented', () => {
    const calls: string[] = [];
    const modules = new ModulesContainer();
    // No swagger module: documentHandlers returns before looking at a handler.
    documentHandlers(modules, () => {
      calls.push('layerFor');
      return null;
    }, null);
    expect(calls).toEqual([]);
  });
});
