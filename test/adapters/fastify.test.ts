import { fastifySuite } from '../suites/fastify.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';

await httpConformanceSuite('fastify');
fastifySuite();
