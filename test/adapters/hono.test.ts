import { conformance } from './conformance.js';

await conformance('hono');
