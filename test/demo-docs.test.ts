/**
 * The demo's API document and Swagger UI (H21, H7): `/openapi.json` validates and documents
 * the key on the protected debit only, `/docs` is Swagger UI served from the installed
 * `swagger-ui-dist`, and in Debian's Chromium (driven by playwright-core, no browser
 * download) "Try it out" sends the same debit twice with one key: the second answer is
 * the replay (`idempotent-replayed: true`), and the account is debited once.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemo } from '../examples/demo.js';
import type { OpenApiDocument } from '../src/openapi.js';
import { clientTypesErrors, expectValidDocument } from './helpers/openapi.js';

const CHROMIUM = '/usr/bin/chromium';
if (!existsSync(CHROMIUM) && !process.env.CI) {
  console.warn(`\n!!! SKIPPED: the Swagger UI test needs Debian's Chromium at ${CHROMIUM} (apt-get install -y chromium); it fails when CI is set\n`);
}
const dir = mkdtempSync(join(tmpdir(), 'idempotency-demo-docs-'));
let demo: Awaited<ReturnType<typeof startDemo>>;

beforeAll(async () => {
  demo = await startDemo({ adapter: 'express', storeUrl: `sqlite://${join(dir, 'docs.sqlite')}`, workMs: 10 });
});
afterAll(async () => {
  await demo?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the demo serves its OpenAPI document and Swagger UI at /docs', () => {
  it('H21: /openapi.json validates and has the key on the protected debit only', async () => {
    const document = (await (await fetch(`${demo.url}/openapi.json`)).json()) as OpenApiDocument;
    await expectValidDocument(document);
    expect(await clientTypesErrors(document, ['POST /accounts/{id}/debits'])).toEqual([]);
    const page = await fetch(`${demo.url}/docs`);
    expect(page.headers.get('content-type')).toContain('text/html');
    const html = await page.text();
    // Served from the installed package, never from a CDN.
    expect(html).not.toMatch(/https?:\/\//);
    const bundle = await fetch(`${demo.url}/docs/swagger-ui-bundle.js`);
    expect([bundle.status, bundle.headers.get('content-type')]).toEqual([200, 'text/javascript; charset=utf-8']);
    expect((await fetch(`${demo.url}/docs/..%2Fpackage.json`)).status).toBe(404);
  });

  it.skipIf(!existsSync(CHROMIUM) && !process.env.CI)('H7 H21: in Chromium, "Try it out" twice with one key: the second answer is the replay, one debit', async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
    const profile = mkdtempSync(join(tmpdir(), 'idempotency-chromium-'));
    let context: BrowserContext | undefined;
    try {
      context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--disable-quic',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
        ],
      });
      const page = context.pages()[0] ?? (await context.newPage());
      // Only the demo is reachable: a request anywhere else (a CDN) fails the test.
      const elsewhere: string[] = [];
      await page.route('**/*', (route) => {
        if (route.request().url().startsWith(demo.url)) return route.continue();
        elsewhere.push(route.request().url());
        return route.abort();
      });
      await page.goto(`${demo.url}/docs`);
      const operation = page.locator('#operations-default-debit');
      await operation.locator('.opblock-summary').click();
      await operation.getByRole('button', { name: 'Try it out' }).click();
      await operation.locator('tr[data-param-name="id"] input').fill('acc_docs');
      await operation.locator('tr[data-param-name="Idempotency-Key"] input').fill('docs-order-1');
      const replies: { status: number; replayed: string | undefined; body: string }[] = [];
      for (let i = 0; i < 2; i++) {
        const [response] = await Promise.all([
          page.waitForResponse((r) => r.url().endsWith('/accounts/acc_docs/debits') && r.request().method() === 'POST'),
          operation.getByRole('button', { name: 'Execute' }).click(),
        ]);
        replies.push({ status: response.status(), replayed: (await response.allHeaders())['idempotent-replayed'], body: await response.text() });
        // What the page shows of the answer: its status and its headers.
        await expect.poll(() => operation.locator('.live-responses-table tr.response .response-col_status').first().textContent()).toContain(String(response.status()));
      }
      expect(replies.map((r) => [r.status, r.replayed])).toEqual([
        [201, undefined],
        [201, 'true'],
      ]);
      expect(replies[1]!.body).toBe(replies[0]!.body);
      await expect.poll(() => operation.locator('.live-responses-table').textContent()).toMatch(/idempotent-replayed:\s*true/);
      expect(demo.payments.balance('acc_docs')).toBe(9000);
      expect(elsewhere).toEqual([]);
    } finally {
      await context?.close();
      rmSync(profile, { recursive: true, force: true });
    }
  }, 60_000);
});
