/**
 * `@as-integrations/express5`'s `expressMiddleware` (Apollo Server on Express 5), for
 * when that package is not installed: the stock `ApolloDriver` of `@nestjs/apollo` loads
 * it through Nest's package loader, whose cache `installApolloExpress()` fills first.
 * Everything else (the driver, Apollo Server, graphql-js, Nest's resolver pipeline) is
 * the real code. With the package installed, nothing is replaced.
 */
import { createRequire } from 'node:module';
import { HeaderMap, type ApolloServer, type BaseContext } from '@apollo/server';
import { loadPackageSync } from '@nestjs/common/utils/load-package.util.js';

const PACKAGE = '@as-integrations/express5';

interface ExpressRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
}
interface ExpressResponse {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  write(chunk: string): unknown;
  end(body?: string): unknown;
}

function expressMiddleware(server: ApolloServer<BaseContext>, options?: { context?: (arg: { req: unknown; res: unknown }) => Promise<BaseContext> }) {
  const context = options?.context ?? (async () => ({}));
  return (req: ExpressRequest, res: ExpressResponse, next: (error: unknown) => void) => {
    const headers = new HeaderMap();
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
    }
    const search = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    server
      .executeHTTPGraphQLRequest({
        httpGraphQLRequest: { method: req.method.toUpperCase(), headers, search, body: req.body },
        context: () => context({ req, res }),
      })
      .then(async (answer) => {
        for (const [name, value] of answer.headers) res.setHeader(name, value);
        res.statusCode = answer.status ?? 200;
        if (answer.body.kind === 'complete') {
          res.end(answer.body.string);
          return;
        }
        for await (const chunk of answer.body.asyncIterator) res.write(chunk);
        res.end();
      })
      .catch(next);
  };
}

/** Make `@nestjs/apollo`'s Express platform work without `@as-integrations/express5` installed. */
export function installApolloExpress(): void {
  try {
    createRequire(import.meta.url).resolve(PACKAGE);
    return; // installed: the driver loads the real one
  } catch {
    loadPackageSync(PACKAGE, 'GraphQLModule', () => ({ expressMiddleware }));
  }
}
