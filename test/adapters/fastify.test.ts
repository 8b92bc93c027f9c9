import { fastifySuite } from '../suites/fastify.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';

await httpConformanceSuite('fastify', APPS.fastify);
fastifySuite();
