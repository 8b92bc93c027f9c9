/**
 * What the README promises a newcomer: the two set-up commands, and every code snippet is
 * a complete program that runs as pasted (saved as .mjs, run with node). A snippet that
 * listens on PORT is started and sent a keyed request twice; the others must exit 0.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { send } from './adapters/client.js';
import { importsFromSources } from './helpers/package-imports.js';
import { freePort, untilListening } from './helpers/ports.js';

const root = fileURLToPath(new URL('../', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');
/** Pages whose ```js blocks are complete programs, run as pasted. */
const RUNNABLE_PAGES = ['README.md', 'docs/writing-an-adapter.md'];
// Under node_modules so that git never sees it; inside the project so that imports resolve.
const dir = join(root, 'node_modules', '.cache', `idempotency-readme-${randomUUID().slice(0, 8)}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every ```js block of a page with the heading it sits under (```ts blocks are fragments). */
function snippets(page: string): Array<{ heading: string; code: string }> {
  const found: Array<{ heading: string; code: string }> = [];
  let heading = '';
  const lines = readFileSync(join(root, page), 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith('#')) heading = line.replace(/^#+\s*/, '');
    const open = /^```(js|mjs)\s*$/.exec(line);
    if (!open) continue;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith('```'); i++) body.push(lines[i]!);
    found.push({ heading, code: body.join('\n') });
  }
  return found;
}

/** The package is not installed under its own name here: its sources stand in for it. */
function runnable(code: string): string {
  return importsFromSources(code);
}

describe('README', () => {
  it('shows the two set-up commands: the demo on an embedded store, and the tests', () => {
    expect(readme).toMatch(/npm ci && npm start/);
    expect(readme).toMatch(/^npm test/m);
  });

  it('has an Install section naming the package and the store packages', () => {
    expect(readme).toMatch(/## Install[\s\S]*npm install idempotency-kit/);
    expect(readme).toMatch(/ES modules/);
  });

  it('has runnable snippets, and no ts fragment in the README', () => {
    expect(snippets('README.md').length).toBeGreaterThanOrEqual(2);
    expect(readme).not.toMatch(/^```ts/m);
  });
});

describe.each(RUNNABLE_PAGES)('%s: every js snippet runs as pasted', (page) => {
  snippets(page).forEach(({ heading, code }, n) => {
    it(`snippet ${n + 1} (under "${heading}")`, async () => {
      mkdirSync(dir, { recursive: true });
      const cwd = join(dir, `${page.replace(/\W/g, '-')}-${n + 1}`);
      mkdirSync(cwd, { recursive: true });
      const file = join(cwd, 'snippet.mjs');
      writeFileSync(file, runnable(code));
      const port = await freePort();
      const { IDEMPOTENCY_STORE: _ignored, ...env } = process.env;
      const child = spawn(process.execPath, ['--import', 'tsx', file], {
        cwd,
        env: { ...env, PORT: String(port) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      try {
        if (/\.listen\(process\.env\.PORT/.test(code)) {
          await untilListening(port, () => (child.exitCode === null ? undefined : output));
          const url = `http://127.0.0.1:${port}`;
          const request = { path: '/orders', key: `readme-${randomUUID()}`, body: { sku: 'A1' } };
          const first = await send(url, request);
          expect(first.status, output + first.text).toBe(201);
          const again = await send(url, request);
          expect(again.status).toBe(201);
          expect(again.headers['idempotent-replayed']).toBe('true');
          expect(again.body.equals(first.body)).toBe(true);
          const other = await send(url, { ...request, key: `readme-${randomUUID()}` });
          expect(other.json().id).not.toBe(first.json().id);
        } else {
          const code = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 20_000))]);
          expect(code, output).toBe(0);
        }
      } finally {
        if (child.exitCode === null) {
          child.kill('SIGTERM');
          await exited;
        }
      }
    });
  });
});

/**
 * The user docs stand alone: they state rules in words and link only to pages a reader can
 * open. A rule id (the names tests use) or a link out of the repository to a file a reader
 * does not have is a defect; so is a relative link or an anchor that leads nowhere.
 */
/** README.md and every .md under docs/, as paths relative to the repository root. */
function userDocs(): string[] {
  const pages = ['README.md'];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) pages.push(path);
    }
  };
  walk('docs');
  return pages;
}

interface Line {
  n: number;
  text: string;
  /** Inside a fenced code block. */
  code: boolean;
}

function lines(markdown: string): Line[] {
  let fence: string | undefined;
  return markdown.split('\n').map((text, i) => {
    const open = /^\s*(`{3,}|~{3,})/.exec(text);
    if (fence === undefined && open) {
      fence = open[1]!;
      return { n: i + 1, text, code: true };
    }
    if (fence !== undefined) {
      if (open && open[1]!.startsWith(fence[0]!) && open[1]!.length >= fence.length && text.trim() === open[1]) fence = undefined;
      return { n: i + 1, text, code: true };
    }
    return { n: i + 1, text, code: false };
  });
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of lines(markdown)) {
    const heading = !line.code && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line.text);
    if (!heading) continue;
    const text = heading[1]!.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1');
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

const RULE_ID = /\b[HSC]\d{1,2}\b|\bSPEC\b|§\s?\d/;

/** The one section of the user docs that names rule ids: the legend of the tags in test names. */
const RULE_LEGEND = { page: 'docs/architecture.md', heading: '## Rule ids in test names' };

/** `markdown` with the rule legend's lines blanked (line numbers kept), on the page that has it. */
function withoutRuleLegend(page: string, markdown: string): string {
  if (page !== RULE_LEGEND.page) return markdown;
  const all = markdown.split('\n');
  const start = all.indexOf(RULE_LEGEND.heading);
  if (start === -1) return markdown;
  const next = all.findIndex((line, i) => i > start && /^#{1,2}\s/.test(line));
  const end = next === -1 ? all.length : next;
  return all.map((line, i) => (i >= start && i < end ? '' : line)).join('\n');
}

/** Rule ids cited in prose, inline code, or a code block's comments. */
function ruleIdCitations(markdown: string): string[] {
  const found: string[] = [];
  for (const line of lines(markdown)) {
    // In code, only comments are prose: the code itself is what a user runs.
    const prose = line.code ? (/(?:\/\/|\s--\s|^\s*#\s)(.*)$/.exec(line.text)?.[1] ?? '') : line.text;
    const hit = RULE_ID.exec(prose);
    if (hit) found.push(`line ${line.n}: ${hit[0]} in ${JSON.stringify(line.text.trim())}`);
  }
  return found;
}

/** Every link target outside code: inline links, images, reference definitions and HTML href/src. */
function linkTargets(markdown: string): { n: number; target: string }[] {
  const targets: { n: number; target: string }[] = [];
  for (const line of lines(markdown)) {
    if (line.code) continue;
    const text = line.text.replace(/(`+)[^`]*?\1/g, ''); // a link in inline code is not a link
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) targets.push({ n: line.n, target: m[1]! });
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(text);
    if (definition) targets.push({ n: line.n, target: definition[1]! });
    for (const m of text.matchAll(/\b(?:href|src)\s*=\s*["']([^"']+)["']/g)) targets.push({ n: line.n, target: m[1]! });
  }
  return targets;
}

const PRIVATE_HOST = /^(localhost|.*\.local|.*\.internal|.*\.example|example\.(com|org|net)|127\.\d+\.\d+\.\d+|10\.\d+\.\d+\.\d+|192\.168\.\d+\.\d+|172\.(1[6-9]|2\d|3[01])\.\d+\.\d+|\[?::1\]?|0\.0\.0\.0)$/i;

/** What is wrong with each link of `page` (a path relative to the repository root). */
function brokenLinks(page: string, markdown: string, read: (path: string) => string | undefined): string[] {
  const problems: string[] = [];
  const pageDir = posix.dirname(page);
  for (const { n, target } of linkTargets(markdown)) {
    const where = `${page}:${n} ${target}`;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
      let url: URL;
      try {
        url = new URL(target);
      } catch {
        problems.push(`${where}: not a URL`);
        continue;
      }
      if (url.protocol === 'mailto:') continue;
      if (url.protocol !== 'https:') problems.push(`${where}: only public https pages may be linked`);
      else if (PRIVATE_HOST.test(url.hostname)) problems.push(`${where}: not a public host`);
      continue;
    }
    if (target.startsWith('//') || target.startsWith('/')) {
      problems.push(`${where}: absolute paths do not resolve for a reader; link relative to the page`);
      continue;
    }
    const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined];
    const resolved = pathPart === '' ? page : posix.normalize(posix.join(pageDir, decodeURIComponent(pathPart)));
    if (resolved === '..' || resolved.startsWith('../')) {
      problems.push(`${where}: leaves the repository`);
      continue;
    }
    const content = read(resolved);
    if (content === undefined) {
      problems.push(`${where}: ${resolved} does not exist`);
      continue;
    }
    if (anchor !== undefined && resolved.endsWith('.md') && !headingAnchors(content).has(anchor)) {
      problems.push(`${where}: no heading #${anchor} in ${resolved}`);
    }
  }
  return problems;
}

/** A file of the repository (a directory counts: GitHub shows it), or undefined. */
function readRepoFile(path: string): string | undefined {
  const full = join(root, path);
  if (path.split('/').includes('node_modules') || !existsSync(full)) return undefined;
  return statSync(full).isDirectory() ? '' : readFileSync(full, 'utf8');
}

/** What `npm pack` ships (package.json `files`): the only files a shipped page may link to. */
const shipped: string[] = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).files;

/** A file of the published package, or undefined (an example or a test is in the repository only). */
function readPackagedFile(path: string): string | undefined {
  const inPackage = shipped.some((entry) => path === entry || path.startsWith(`${entry}/`));
  return inPackage ? readRepoFile(path) : undefined;
}

describe('user docs stand alone', () => {
  const pages = userDocs();

  it('finds the pages to check', () => {
    expect(pages).toEqual(expect.arrayContaining(['README.md', 'docs/semantics.md', 'docs/errors.md', 'docs/adapters/express.md']));
  });

  for (const page of pages) {
    it(`${page}: says rules in words (no rule ids, no SPEC)`, () => {
      expect(ruleIdCitations(withoutRuleLegend(page, readFileSync(join(root, page), 'utf8')))).toEqual([]);
    });
    it(`${page}: every link resolves inside the published package or is a public page`, () => {
      expect(brokenLinks(page, readFileSync(join(root, page), 'utf8'), readPackagedFile)).toEqual([]);
    });
    const text = readFileSync(join(root, page), 'utf8');
    if (text.includes('npx tsx')) {
      it(`${page}: runs its example with npx tsx, and an install line installs tsx`, () => {
        expect(text).toMatch(/^npm install (--save-dev|-D) tsx\b/m);
      });
    }
  }

  for (const page of ['CHANGELOG.md', 'CONTRIBUTING.md']) {
    it(`${page}: every link resolves inside the repository or is a public page`, () => {
      expect(brokenLinks(page, readFileSync(join(root, page), 'utf8'), readRepoFile)).toEqual([]);
    });
  }

  it('semantics.md has the anchors other pages and the code point to', () => {
    const anchors = headingAnchors(readFileSync(join(root, 'docs/semantics.md'), 'utf8'));
    for (const anchor of ['security', 'body-limits', 'who-is-the-user', 'choosing-a-scope', 'key-collisions', 'concurrent-duplicates', 'the-fingerprint']) {
      expect(anchors, anchor).toContain(anchor);
    }
  });

  it('the docs pages and anchors that shipped code comments point to exist', () => {
    const problems: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
        const path = `${dir}/${entry.name}`;
        if (entry.isDirectory()) walk(path);
        else if (/\.[cm]?ts$/.test(entry.name)) {
          const source = readFileSync(join(root, path), 'utf8');
          for (const [, target] of source.matchAll(/\b(docs\/[\w/.-]+\.md(?:#[\w-]+)?)/g)) {
            problems.push(...brokenLinks('README.md', `[x](${target})`, readRepoFile).map((p) => `${path}: ${p}`));
          }
        }
      }
    };
    for (const dir of ['src', 'adapters', 'drivers']) if (existsSync(join(root, dir))) walk(dir);
    expect(problems).toEqual([]);
  });

  it('errors.md has one heading per error code', () => {
    const anchors = headingAnchors(readFileSync(join(root, 'docs/errors.md'), 'utf8'));
    const codes = /export type IdempotencyErrorCode =([^;]*);/.exec(readFileSync(join(root, 'src/errors.ts'), 'utf8'))![1]!;
    for (const [, code] of codes.matchAll(/'([a-z-]+)'/g)) expect(anchors, code).toContain(code);
  });

  it('the checks catch what they are meant to catch', () => {
    const files: Record<string, string> = { 'docs/semantics.md': '# Semantics\n\n## Concurrent duplicates\n\n### Retry `after` (409)\n', 'docs/a.md': '' };
    const read = (path: string) => files[path];
    expect(ruleIdCitations('Waits, then 409 [H8].')).toHaveLength(1);
    expect(ruleIdCitations('See the `S6` rule.')).toHaveLength(1);
    expect(ruleIdCitations('The SPEC says so.')).toHaveLength(1);
    expect(ruleIdCitations('as §6 says')).toHaveLength(1);
    expect(ruleIdCitations('```ts\nconst x = 1; // fencing (H18)\n```')).toHaveLength(1);
    expect(ruleIdCitations('```sql\nkey text -- hashed (S7)\n```')).toHaveLength(1);
    expect(ruleIdCitations('```ts\nconst H1 = 2;\n```\nHTTP/2 and H1N1 and S3ish')).toEqual([]);
    const legendPage = '# A\n\nH8 before\n\n## Rule ids in test names\n\n- **H8** waits\n\n## After\n\nS2 after\n';
    expect(ruleIdCitations(withoutRuleLegend('docs/architecture.md', legendPage))).toHaveLength(2);
    expect(ruleIdCitations(withoutRuleLegend('docs/semantics.md', legendPage))).toHaveLength(3);
    expect(brokenLinks('docs/a.md', '[spec](../../shared/SPEC.md)', read)).toHaveLength(1);
    expect(brokenLinks('docs/a.md', '[x](missing.md)', read)).toHaveLength(1);
    expect(brokenLinks('docs/a.md', '[x](semantics.md#nowhere)', read)).toHaveLength(1);
    expect(brokenLinks('docs/a.md', '[x](semantics.md#concurrent-duplicates) [y](semantics.md#retry-after-409)', read)).toEqual([]);
    expect(brokenLinks('docs/a.md', '[x](#nowhere)', read)).toHaveLength(1);
    expect(brokenLinks('docs/a.md', '[x](file:///work/shared/SPEC.md) [y](http://localhost:3000/) [z](/work/x.md)', read)).toHaveLength(3);
    expect(brokenLinks('docs/a.md', '[rfc](https://www.rfc-editor.org/rfc/rfc9457) `[x](nowhere.md)`', read)).toEqual([]);
    expect(brokenLinks('docs/a.md', '```md\n[x](nowhere.md)\n```', read)).toEqual([]);
  });
});

describe('the maps', () => {
  const folders = (dir: string) =>
    readdirSync(join(root, dir), { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.') && !['node_modules', 'dist', 'coverage'].includes(entry.name))
      .map((entry) => entry.name);

  it('CONTRIBUTING.md links to the one map of the code and names every top-level folder', () => {
    const text = readFileSync(join(root, 'CONTRIBUTING.md'), 'utf8');
    const structure = /## Code structure\n([\s\S]*?)\n## /.exec(text)?.[1] ?? '';
    expect(structure).toContain('(docs/architecture.md)');
    expect(structure).toContain('(test/README.md)');
    const map = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
    for (const dir of folders('.')) expect(`${structure}\n${map}`, `${dir}/ is named in neither`).toContain(`${dir}/`);
  });

  it("test/README.md's table names every test folder, and only folders that exist", () => {
    const text = readFileSync(join(root, 'test/README.md'), 'utf8');
    const named = [...text.matchAll(/^\| `([a-z0-9-]+)\/` \|/gm)].map((m) => m[1]!);
    expect(named.length).toBeGreaterThan(10);
    for (const dir of named) expect(existsSync(join(root, 'test', dir)), `test/${dir}/ is in the table but not in the repository`).toBe(true);
    for (const dir of folders('test')) expect(named, `test/${dir}/ is missing from the table`).toContain(dir);
  });
});
