/**
 * The Lambda adapter passes the shared conformance table over real sockets, behind a local
 * stand-in for API Gateway's HTTP API (./lambda-apps.ts). One scenario does not apply: a
 * function never learns that the client left (API Gateway does not tell it), so renewal
 * cannot stop at a disconnect; in Lambda a claim is bounded by the invocation's deadline
 * instead (test/adapters/lambda-specifics.test.ts).
 */
import { httpConformanceSuite } from '../suites/http-conformance.suite.js';
import { lambdaApp } from './lambda-apps.js';

await httpConformanceSuite('lambda', lambdaApp, {
  skip: ['a handler that hangs after its client left holds the key only until leaseMs: renewal stops at the disconnect'],
});
