import { conformanceOnWorkerd } from './conformance.js';

conformanceOnWorkerd('fetch', ['do', 'd1']);
