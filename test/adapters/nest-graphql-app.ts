/**
 * A NestJS 12 app with @nestjs/graphql on the Apollo driver, served over real HTTP, for the
 * GraphQL tests: the idempotency module, Passport, and the resolvers a test gives.
 */
import 'reflect-metadata';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Module, type INestApplication, type Type } from '@nestjs/common';
import { PassportModule } from '@nestjs/passport';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { Test } from '@nestjs/testing';
import { afterEach } from 'vitest';
import type { IdempotencyEvent } from '../../src/events.js';
import type { IdempotencyStore } from '../../src/store.js';
import { IdempotencyModule, type IdempotencyModuleOptions } from '../../adapters/nestjs/index.js';

export const COUNTER = Symbol('counter');
export const GATE = Symbol('gate');

export class Gate {
  open!: () => void;
  readonly promise = new Promise<void>((resolve) => (this.open = resolve));
}
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class Counter {
  n = 0;
  hit(): number {
    return ++this.n;
  }
}

export interface GraphqlResult {
  status: number;
  headers: Headers;
  body: { data?: Record<string, any> | null; errors?: Array<{ message: string; extensions?: Record<string, any> }> };
}

export interface Started {
  url: string;
  counter: Counter;
  gate: Gate;
  events: IdempotencyEvent[];
  request(query: string, options?: { key?: string; user?: string; variables?: Record<string, unknown>; headers?: Record<string, string> }): Promise<GraphqlResult>;
  close(): Promise<void>;
}

const running: Started[] = [];
afterEach(async () => {
  for (const app of running.splice(0)) await app.close();
});

/** Start an app with `providers` (its resolvers, a Passport strategy); the module with `options` on `store`. */
export async function startGraphqlApp(store: IdempotencyStore, options: Partial<IdempotencyModuleOptions>, providers: Type<unknown>[]): Promise<Started> {
  const counter = new Counter();
  const gate = new Gate();
  const events: IdempotencyEvent[] = [];
  @Module({
    imports: [
      IdempotencyModule.forRoot({ store, onEvent: (e) => events.push(e), ...options }),
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true, context: ({ req, res }: { req: unknown; res: unknown }) => ({ req, res }) }),
      PassportModule,
    ],
    providers: [...providers, { provide: COUNTER, useValue: counter }, { provide: GATE, useValue: gate }],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const nest: INestApplication = moduleRef.createNestApplication({ logger: false });
  await nest.listen(0, '127.0.0.1');
  const { port } = (nest.getHttpServer() as http.Server).address() as AddressInfo;
  const url = `http://127.0.0.1:${port}/graphql`;
  const app: Started = {
    url,
    counter,
    gate,
    events,
    async request(query, { key, user, variables, headers: extra } = {}) {
      const headers: Record<string, string> = { 'content-type': 'application/json', ...extra };
      if (key !== undefined) headers['idempotency-key'] = key;
      if (user !== undefined) headers['x-user'] = user;
      const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
      return { status: res.status, headers: res.headers, body: (await res.json()) as GraphqlResult['body'] };
    },
    close: async () => {
      (nest.getHttpServer() as http.Server).closeAllConnections();
      await nest.close();
    },
  };
  running.push(app);
  return app;
}

