import { conformance } from './conformance.js';

await conformance('koa2');
