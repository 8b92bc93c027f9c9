/**
 * Preloaded into a bench server by `npm run bench -- --heap-sample`: V8's sampling heap
 * profiler, counting every allocation (objects the collectors freed included), between
 * two SIGUSR2 signals; the second writes the profile to HEAP_SAMPLE_OUT.
 */
import { renameSync, writeFileSync } from 'node:fs';
import inspector from 'node:inspector';

const out = process.env.HEAP_SAMPLE_OUT;
if (out) {
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.enable');
  let sampling = false;
  process.on('SIGUSR2', () => {
    if (!sampling) {
      sampling = true;
      session.post('HeapProfiler.startSampling', {
        samplingInterval: 4096,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true,
      });
      return;
    }
    sampling = false;
    session.post('HeapProfiler.stopSampling', (error, result) => {
      if (error) process.stderr.write(`heap sampling failed: ${error.message}\n`);
      else {
        // Whole or not at all: the bench reads the file as soon as it appears.
        writeFileSync(`${out}.partial`, JSON.stringify(result.profile));
        renameSync(`${out}.partial`, out);
      }
    });
  });
}
