import { conformanceOnWorkerd } from './conformance.js';

conformanceOnWorkerd('hono', ['do', 'd1']);
