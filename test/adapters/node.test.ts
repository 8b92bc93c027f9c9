import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';

await httpConformanceSuite('node', APPS.node);
