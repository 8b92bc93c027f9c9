import express from 'express4';
import { expressSuite } from '../suites/express.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';

await httpConformanceSuite('express4');
expressSuite('express 4', express);
