import express from 'express';
import { expressSuite } from '../suites/express.suite.js';
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';

await httpConformanceSuite('express');
expressSuite('express 5', express);
