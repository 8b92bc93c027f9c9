import express from 'express';
import { expressSuite } from '../suites/express.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { APPS } from './apps.js';

await httpConformanceSuite('express', APPS.express);
expressSuite('express 5', express);
