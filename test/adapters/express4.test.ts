import express from 'express4';
import { expressSuite } from '../suites/express.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';

await httpConformanceSuite('express4', APPS.express4);
expressSuite('express 4', express);
