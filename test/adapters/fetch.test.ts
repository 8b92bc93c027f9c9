import { conformance } from './conformance.js';

await conformance('fetch');
