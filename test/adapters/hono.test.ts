import { httpConformanceSuite } from '../suites/http-conformance.suite.js';

await httpConformanceSuite('hono');
