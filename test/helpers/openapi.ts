/**
 * Proof for the OpenAPI descriptions the layer writes (H21): a document validates with a
 * maintained validator (@readme/openapi-parser: the OpenAPI 3.0 and 3.1 schemas plus its
 * own checks), and the client types `openapi-typescript` generates from it have the key
 * header on exactly the covered operations (checked by compiling assertions against them).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileErrors, validate } from '@readme/openapi-parser';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { expect } from 'vitest';
import type { OpenApiDocument } from '../../src/openapi.js';

/** Validate `document`; a failure names every error. */
export async function expectValidDocument(document: OpenApiDocument): Promise<void> {
  const result = await validate(structuredClone(document) as never);
  expect(result.valid, result.valid ? "" : compileErrors(result)).toBe(true);
}

/** Every operation of a document, `METHOD path`. */
export function operationsOf(document: OpenApiDocument): string[] {
  const out: string[] = [];
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    for (const method of ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']) {
      if (item && typeof item[method] === 'object') out.push(`${method.toUpperCase()} ${path}`);
    }
  }
  return out;
}

/**
 * Generate the client types of `document` with openapi-typescript and compile, against
 * them, that the operations in `covered` take `header` (as required, when `required`, or
 * as `covered` says per operation) and
 * that every other operation does not: the compiler's errors, none when all hold.
 */
export async function clientTypesErrors(
  document: OpenApiDocument,
  covered: string[] | Record<string, boolean>,
  header = 'Idempotency-Key',
  required = true,
): Promise<string[]> {
  const requiredOf = new Map(Array.isArray(covered) ? covered.map((op) => [op, required]) : Object.entries(covered));
  const types = astToString(await openapiTS(structuredClone(document) as never));
  const lines = ["import type { paths } from './types.js';", 'type Header<O> = O extends { parameters: { header?: infer H } } ? H : never;'];
  operationsOf(document).forEach((op, i) => {
    const [method, path] = op.split(' ') as [string, string];
    const type = `Header<paths[${JSON.stringify(path)}][${JSON.stringify(method.toLowerCase())}]>`;
    if (requiredOf.has(op)) {
      lines.push(`const k${i}: NonNullable<${type}>[${JSON.stringify(header)}] = 'k';`);
      if (requiredOf.get(op)) lines.push(`// @ts-expect-error ${op}: the key is required\nconst r${i}: ${type} = {};`);
      else lines.push(`const r${i}: ${type} = {};`);
    } else {
      lines.push(`// @ts-expect-error ${op}: not covered, no key header\nconst k${i}: NonNullable<${type}>[${JSON.stringify(header)}] = 'k';`);
    }
  });
  const dir = mkdtempSync(join(tmpdir(), 'idempotency-openapi-'));
  try {
    writeFileSync(join(dir, 'types.ts'), types);
    writeFileSync(join(dir, 'check.ts'), `${lines.join('\n')}\nexport {};\n`);
    const program = ts.createProgram([join(dir, 'check.ts')], {
      strict: true,
      noEmit: true,
      noUnusedLocals: false,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      skipLibCheck: true,
      types: [],
    });
    return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The parts the contract added to a document, for a snapshot: its components and the covered operations. */
export function addedParts(document: OpenApiDocument, covered: string[]): unknown {
  const components = Object.fromEntries(
    Object.entries(document.components ?? {}).map(([kind, parts]) => [
      kind,
      Object.fromEntries(Object.entries(parts ?? {}).filter(([name]) => name.startsWith('Idempoten'))),
    ]),
  );
  const operations = Object.fromEntries(
    covered.map((op) => {
      const [method, path] = op.split(' ') as [string, string];
      const operation = document.paths![path]![method.toLowerCase()] as Record<string, unknown>;
      return [op, { parameters: operation.parameters, responses: operation.responses }];
    }),
  );
  return { components, operations };
}
