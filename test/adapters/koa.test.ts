import Koa from 'koa';
import { conformance } from './conformance.js';
import { koaSpecifics } from './koa-specifics.js';

await conformance('koa');
koaSpecifics('koa 3', Koa, 3);
