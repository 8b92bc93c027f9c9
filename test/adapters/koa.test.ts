import Koa from 'koa';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';
import { koaSuite } from '../suites/koa.suite.js';

await httpConformanceSuite('koa', APPS.koa);
koaSuite('koa 3', Koa, 3);
