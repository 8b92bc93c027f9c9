import Koa from 'koa2';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';
import { koaSuite } from '../suites/koa.suite.js';

await httpConformanceSuite('koa2', APPS.koa2);
koaSuite('koa 2', Koa, 2);
