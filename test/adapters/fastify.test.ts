import { conformance } from './conformance.js';
import { fastifySpecifics } from './fastify-specifics.js';

await conformance('fastify');
fastifySpecifics();
