/**
 * Prints one plain closing line, `N passed, N failed, N skipped`, after vitest's own
 * summary, so that a CI log reader that does not know vitest still sees the counts.
 */
import type { Reporter, TestModule } from 'vitest/node';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const counts = { passed: 0, failed: 0, skipped: 0 };
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') counts.passed++;
        else if (state === 'failed') counts.failed++;
        else counts.skipped++;
      }
      // A file that failed to load has no tests to count but must not read as a pass.
      if (module.state() === 'failed' && [...module.children.allTests()].length === 0) counts.failed++;
    }
    process.stdout.write(`\n${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped\n`);
  }
}
